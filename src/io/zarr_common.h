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

// Python's json.dumps (zarr-python's attributes) writes NaN, Infinity and
// -Infinity bare, which JSON lacks: outside strings they become null, so
// that such an attribute does not make the whole store unreadable.
inline std::string python_nonfinite_as_null(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::char_traits<char>::length(word);
      if (text.compare(i, n, word) == 0) {
        out += "null";
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

}  // namespace wg::zarr::detail
