// bench_vs_pytorch's small helpers for numbers and text: the median of
// timings, shell quoting, the load average, the date, lists as text.
// No LibTorch here.
#pragma once

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace wg::bench::vs {

// The median (the mean of the two middle ones of an even count); NaN for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline std::string quote(const std::string& s) { return "'" + s + "'"; }

inline std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

inline std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&t));
  return buf;
}

// Comma-separated, with every digit a double holds.
inline std::string join_doubles(const std::vector<double>& v) {
  std::ostringstream os;
  os.precision(17);
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

// The --config files in their order, "a.yml + b.yml" (their file names
// alone when `names`).
inline std::string join_files(const std::vector<std::string>& files, bool names) {
  std::string out;
  for (const auto& f : files)
    out += (out.empty() ? "" : " + ") + (names ? std::filesystem::path(f).filename().string() : f);
  return out;
}

}  // namespace wg::bench::vs
