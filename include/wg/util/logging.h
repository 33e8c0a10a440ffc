// spdlog set-up: one pattern for the whole process, with the rank in every
// line once the distributed context is known.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

// level: "trace" .. "off". Rank < 0: no rank prefix.
void setup_logging(const std::string& level = "info", int rank = -1);

}  // namespace wg
