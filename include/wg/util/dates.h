// UTC dates as int64 seconds since 1970-01-01: parsing WeatherGenerator's
// config form (YYYYMMDDHHMM) and the ISO 8601 forms anemoi stores use, and
// printing them back for messages. No time zones, no leap seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace wg {

// "197901010000" -> seconds; nullopt unless exactly 12 digits forming a real date.
std::optional<int64_t> parse_yyyymmddhhmm(const std::string& text);

// "2020-01-01T06:00:00", "2020-01-01T06:00", "2020-01-01 06:00:00" or
// "2020-01-01" (optionally ending in Z) -> seconds; nullopt otherwise.
std::optional<int64_t> parse_iso_date(const std::string& text);

// A date of a config file in the forms WeatherGenerator's
// str_to_datetime64 takes: YYYYMMDDHHMM (its configs' form), YYYYMMDDHHMMSS,
// and the ISO forms with a time (T or a space, seconds optional). The 12
// digits are read as written: upstream's strptime("%Y%m%d%H%M%S") reads
// "201001011230" as 12:03:00 (docs/upstream-differences.md).
std::optional<int64_t> parse_config_date(const std::string& text);

// Seconds -> "2020-01-01T06:00" and -> "202001010600".
std::string iso_date(int64_t seconds);
std::string yyyymmddhhmm(int64_t seconds);

}  // namespace wg
