// UTC date conversions (see header). Civil-date arithmetic after Howard
// Hinnant's days_from_civil / civil_from_days algorithms.
#include "wg/util/dates.h"

#include <cctype>
#include <cstdio>

namespace wg {

namespace {

int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = unsigned(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + int64_t(doe) - 719468;
}

void civil_from_days(int64_t z, int64_t& y, unsigned& m, unsigned& d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = unsigned(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y = int64_t(yoe) + era * 400 + (m <= 2);
}

bool leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

std::optional<int64_t> from_fields(int64_t y, int mo, int d, int h, int mi, int s) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 59) return std::nullopt;
  if (d > kDays[mo - 1] + (mo == 2 && leap(y))) return std::nullopt;
  return days_from_civil(y, unsigned(mo), unsigned(d)) * 86400 + h * 3600 + mi * 60 + s;
}

// Reads `n` digits at text[pos] into out; false if any is not a digit.
bool digits(const std::string& text, size_t pos, size_t n, int& out) {
  if (pos + n > text.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
    out = out * 10 + (text[i] - '0');
  }
  return true;
}

}  // namespace

std::optional<int64_t> parse_yyyymmddhhmm(const std::string& text) {
  int y, mo, d, h, mi;
  if (text.size() != 12 || !digits(text, 0, 4, y) || !digits(text, 4, 2, mo) || !digits(text, 6, 2, d) ||
      !digits(text, 8, 2, h) || !digits(text, 10, 2, mi))
    return std::nullopt;
  return from_fields(y, mo, d, h, mi, 0);
}

std::optional<int64_t> parse_iso_date(const std::string& raw) {
  std::string text = raw;
  if (!text.empty() && (text.back() == 'Z' || text.back() == 'z')) text.pop_back();
  int y, mo, d, h = 0, mi = 0, s = 0;
  if (!digits(text, 0, 4, y) || text.size() < 10 || text[4] != '-' || !digits(text, 5, 2, mo) || text[7] != '-' ||
      !digits(text, 8, 2, d))
    return std::nullopt;
  if (text.size() > 10) {
    if ((text[10] != 'T' && text[10] != ' ') || !digits(text, 11, 2, h) || text.size() < 16 || text[13] != ':' ||
        !digits(text, 14, 2, mi))
      return std::nullopt;
    if (text.size() > 16 && (text.size() != 19 || text[16] != ':' || !digits(text, 17, 2, s))) return std::nullopt;
  }
  return from_fields(y, mo, d, h, mi, s);
}

std::optional<int64_t> parse_config_date(const std::string& text) {
  if (text.size() == 12) return parse_yyyymmddhhmm(text);
  int y, mo, d, h, mi, s;
  if (text.size() == 14) {
    if (!digits(text, 0, 4, y) || !digits(text, 4, 2, mo) || !digits(text, 6, 2, d) || !digits(text, 8, 2, h) ||
        !digits(text, 10, 2, mi) || !digits(text, 12, 2, s))
      return std::nullopt;
    return from_fields(y, mo, d, h, mi, s);
  }
  if (text.size() < 16) return std::nullopt;  // the ISO forms with a time only, as upstream
  return parse_iso_date(text);
}

std::string iso_date(int64_t seconds) {
  const int64_t days = (seconds >= 0 ? seconds : seconds - 86399) / 86400, rem = seconds - days * 86400;
  int64_t y;
  unsigned m, d;
  civil_from_days(days, y, m, d);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04lld-%02u-%02uT%02d:%02d", (long long)y, m, d, int(rem / 3600),
                int(rem % 3600 / 60));
  return buf;
}

std::string yyyymmddhhmm(int64_t seconds) {
  std::string s = iso_date(seconds);  // YYYY-MM-DDTHH:MM
  return s.substr(0, 4) + s.substr(5, 2) + s.substr(8, 2) + s.substr(11, 2) + s.substr(14, 2);
}

}  // namespace wg
