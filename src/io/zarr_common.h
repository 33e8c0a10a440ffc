// Internals shared by the Zarr reader's files (zarr.cpp, zarr_meta.cpp):
// error reporting, shapes and JSON parsing. Not part of the public API.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wg/io/zarr.h"

namespace wg::zarr::detail {

using json = nlohmann::json;
using Shape = std::vector<int64_t>;

inline constexpr int64_t kMaxChunkBytes = std::numeric_limits<int32_t>::max() - 16;  // blosc's limit

[[noreturn]] inline void fail(const std::string& where, const std::string& msg) { throw ZarrError(where + ": " + msg); }

inline std::string shape_str(const Shape& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

inline int64_t product(const Shape& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

inline json parse_json(const std::string& text, const std::string& file, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(what, file + " is not valid JSON: " + e.what());
  }
}

}  // namespace wg::zarr::detail
