// Process-wide log format (see header).
#include "wg/util/logging.h"

#include <spdlog/spdlog.h>

namespace wg {

void setup_logging(const std::string& level, int rank) {
  const std::string prefix = rank >= 0 ? "[rank " + std::to_string(rank) + "] " : "";
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ " + prefix + "%v");
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace wg
