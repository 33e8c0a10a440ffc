// Process-wide log format (see header).
#include "wg/util/logging.h"

#include <spdlog/spdlog.h>

#include <cstdio>

namespace wg {

void setup_logging(const std::string& level, int rank) {
  const std::string prefix = rank >= 0 ? "[rank " + std::to_string(rank) + "] " : "";
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ " + prefix + "%v");
  spdlog::set_level(spdlog::level::from_str(level));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) { v /= 1024.0; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace wg
