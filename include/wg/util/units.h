// Units and the byte formatting of messages.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// "12.3 MiB"
std::string format_bytes(int64_t bytes);

}  // namespace wg
