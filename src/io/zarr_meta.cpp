// .zarray parsing for the Zarr reader (see wg/io/zarr.h): shape, chunks,
// dtype, compressor, filters, fill value, order and dimension separator,
// each checked with an error naming the array.
#include <cmath>
#include <cstring>
#include <limits>

#include "io/zarr_common.h"
#include "wg/io/zarr.h"

namespace wg::zarr {

namespace {

using namespace detail;

// ---- .zarray --------------------------------------------------------------

const json& field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) fail(where, std::string(".zarray has no '") + key + "'");
  return *it;
}

Shape parse_shape(const json& j, const char* key, int64_t min, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_array()) fail(where, std::string(".zarray '") + key + "' is not a list: " + v.dump());
  Shape out;
  for (const json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < min)
      fail(where, std::string(".zarray '") + key + "' must hold integers >= " + std::to_string(min) + ": " +
                      v.dump());
    out.push_back(x.get<int64_t>());
  }
  return out;
}

void parse_dtype(const json& j, ArrayMeta& m, const std::string& where) {
  struct Known {
    const char* str;
    DType dtype;
    int itemsize;
  };
  static const Known kKnown[] = {{"<f4", DType::F4, 4}, {"<f8", DType::F8, 8}, {"<i8", DType::I8, 8},
                                 {"|b1", DType::B1, 1}, {"<M8[s]", DType::M8s, 8}};
  const json& v = field(j, "dtype", where);
  m.dtype_str = v.is_string() ? v.get<std::string>() : v.dump();
  for (const Known& k : kKnown)
    if (m.dtype_str == k.str) {
      m.dtype = k.dtype;
      m.itemsize = k.itemsize;
      return;
    }
  fail(where, "unsupported dtype '" + m.dtype_str + "' (supported: <f4 <f8 <i8 |b1 <M8[s])");
}

std::string parse_compressor(const json& j, const std::string& where) {
  const json& v = field(j, "compressor", where);
  if (v.is_null()) return "";
  if (!v.is_object() || !v.contains("id") || !v["id"].is_string())
    fail(where, "compressor without an id: " + v.dump());
  const std::string id = v["id"].get<std::string>();
  if (id != "blosc") fail(where, "unsupported compressor '" + id + "' (supported: blosc, or null)");
  return id;
}

void check_filters(const json& j, const std::string& where) {
  auto it = j.find("filters");
  if (it == j.end() || it->is_null() || (it->is_array() && it->empty())) return;
  std::string ids;
  if (it->is_array())
    for (const json& f : *it) ids += (ids.empty() ? "" : ", ") + (f.contains("id") ? f["id"].dump() : f.dump());
  else
    ids = it->dump();
  fail(where, "filters are not supported (found: " + ids + ")");
}

double parse_float_fill(const json& v, const std::string& where) {
  if (v.is_number()) return v.get<double>();
  if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (v == "Infinity") return std::numeric_limits<double>::infinity();
  if (v == "-Infinity") return -std::numeric_limits<double>::infinity();
  fail(where, "bad fill_value for a float array: " + v.dump());
}

int64_t parse_int_fill(const json& v, const std::string& where) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) && std::abs(v.get<double>()) < 9e18)
    return static_cast<int64_t>(v.get<double>());
  fail(where, "bad fill_value for an integer array: " + v.dump());
}

template <typename T>
std::vector<uint8_t> bytes_of(T value) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &value, sizeof(T));
  return b;
}

std::vector<uint8_t> parse_fill(const json& j, const ArrayMeta& m, const std::string& where) {
  auto it = j.find("fill_value");
  if (it == j.end() || it->is_null()) return std::vector<uint8_t>(m.itemsize, 0);
  switch (m.dtype) {
    case DType::F4: return bytes_of(static_cast<float>(parse_float_fill(*it, where)));
    case DType::F8: return bytes_of(parse_float_fill(*it, where));
    case DType::I8:
    case DType::M8s: return bytes_of(parse_int_fill(*it, where));
    case DType::B1: return bytes_of(static_cast<uint8_t>(parse_int_fill(*it, where) != 0));
  }
  fail(where, "unknown dtype");
}

char parse_separator(const json& j, const std::string& where) {
  auto it = j.find("dimension_separator");
  if (it == j.end() || it->is_null() || *it == ".") return '.';
  if (*it == "/") return '/';
  fail(where, "unsupported dimension_separator " + it->dump() + " (supported: \".\" or \"/\")");
}

void check_layout(const json& j, ArrayMeta& m, const std::string& where) {
  const json& format = field(j, "zarr_format", where);
  if (format != 2) fail(where, "zarr_format " + format.dump() + " in .zarray (only 2 is supported)");
  const json& order = field(j, "order", where);
  if (order != "C") fail(where, "order " + order.dump() + " is not supported (only \"C\")");
  m.shape = parse_shape(j, "shape", 0, where);
  m.chunks = parse_shape(j, "chunks", 1, where);
  if (m.chunks.size() != m.shape.size())
    fail(where, "chunks " + shape_str(m.chunks) + " and shape " + shape_str(m.shape) + " differ in rank");
}

}  // namespace

// ---- ArrayMeta --------------------------------------------------------------

int64_t ArrayMeta::chunk_elements() const { return product(chunks); }
int64_t ArrayMeta::chunk_bytes() const { return chunk_elements() * itemsize; }

ArrayMeta parse_array_meta(const std::string& zarray_text, const std::string& where) {
  const json j = parse_json(zarray_text, ".zarray", where);
  if (!j.is_object()) fail(where, ".zarray is not a JSON object");
  ArrayMeta m;
  check_layout(j, m, where);
  parse_dtype(j, m, where);
  m.compressor = parse_compressor(j, where);
  check_filters(j, where);
  m.fill = parse_fill(j, m, where);
  m.separator = parse_separator(j, where);
  int64_t bytes = m.itemsize;
  for (int64_t c : m.chunks)
    if (c > kMaxChunkBytes || (bytes *= c) > kMaxChunkBytes)
      fail(where, "chunks " + shape_str(m.chunks) + " are too large (over 2 GiB per chunk)");
  return m;
}

std::string python_nonfinite_as_null(const std::string& text) {
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

}  // namespace wg::zarr
