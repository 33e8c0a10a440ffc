// safetensors codec (see header). Checks, in order: header length, JSON,
// names (no duplicates), per tensor dtype/shape/offsets, then that the
// tensors tile the data buffer exactly.
#include "wg/io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "wg/util/atomic_file.h"

namespace wg {

namespace {
using json = nlohmann::ordered_json;
constexpr uint64_t kMaxHeader = 100ull << 20;  // the reference implementation's limit

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw SafetensorsError(what + ": " + msg);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
}  // namespace

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::F64: case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8})
    if (n == dtype_name(d)) return d;
  throw std::invalid_argument("unsupported dtype '" + n + "' (supported: F32, F16, BF16, F64, I64, U8)");
}

int64_t TensorRecord::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

const TensorRecord* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what) {
  if (bytes.size() < 8)
    fail(what, "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[size_t(i)]);
  if (n > kMaxHeader) fail(what, "header length " + std::to_string(n) + " is implausible (corrupt file?)");
  if (n > bytes.size() - 8)
    fail(what, "truncated: header length " + std::to_string(n) + " exceeds the " + std::to_string(bytes.size() - 8) +
                   " bytes after it");
  const std::string header = bytes.substr(8, n);
  const uint64_t buffer_size = bytes.size() - 8 - n;

  // Duplicate names would silently overwrite each other in a JSON object:
  // catch them while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  json h;
  try {
    h = json::parse(header, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second &&
          duplicate.empty())
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    fail(what, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(what, "tensor name '" + duplicate + "' appears twice in the header");
  if (!h.is_object()) fail(what, "header is not a JSON object");

  SafetensorsFile file;
  struct Span { uint64_t begin, end; size_t index; };
  std::vector<Span> spans;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(what, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(what, "__metadata__ value of '" + m.key() + "' is not a string");
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(what, where + ": needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) fail(what, where + ": dtype is not a string");
    TensorRecord r;
    r.name = name;
    try {
      r.dtype = dtype_from_name(v["dtype"].get<std::string>());
    } catch (const std::invalid_argument& e) {
      fail(what, where + ": " + e.what());
    }
    if (!v["shape"].is_array()) fail(what, where + ": shape is not a list");
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail(what, where + ": shape entries must be non-negative integers");
      r.shape.push_back(d.get<int64_t>());
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(what, where + ": data_offsets must be two non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e) fail(what, where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] run backwards");
    if (e > buffer_size)
      fail(what, where + ": data_offsets end " + std::to_string(e) + " lies beyond the data buffer (" +
                     std::to_string(buffer_size) + " bytes; truncated file?)");
    const uint64_t need = uint64_t(r.numel()) * dtype_size(r.dtype);
    if (e - b != need)
      fail(what, where + ": data_offsets hold " + std::to_string(e - b) + " bytes but shape " + shape_str(r.shape) +
                     " of " + dtype_name(r.dtype) + " needs " + std::to_string(need));
    spans.push_back({b, e, file.tensors.size()});
    file.tensors.push_back(std::move(r));
  }
  // An empty tensor shares its start with the next: by (begin, end), then header order.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return std::tie(a.begin, a.end, a.index) < std::tie(b.begin, b.end, b.index);
  });
  uint64_t pos = 0;
  for (const Span& s : spans) {
    const std::string& name = file.tensors[s.index].name;
    if (s.begin < pos) fail(what, "tensor '" + name + "' overlaps the tensor before it in the data buffer");
    if (s.begin > pos) fail(what, "the data buffer has a hole of " + std::to_string(s.begin - pos) +
                                      " bytes before tensor '" + name + "'");
    pos = s.end;
  }
  if (pos != buffer_size)
    fail(what, std::to_string(buffer_size - pos) + " bytes after the last tensor are not described by the header");

  const size_t base = 8 + n;
  std::vector<TensorRecord> ordered;
  for (const Span& s : spans) {
    TensorRecord& r = file.tensors[s.index];
    r.data.assign(bytes.begin() + long(base + s.begin), bytes.begin() + long(base + s.end));
    ordered.push_back(std::move(r));
  }
  file.tensors = std::move(ordered);
  return file;
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SafetensorsError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_safetensors(ss.str(), path);
}

std::string serialize_safetensors(const SafetensorsFile& file) {
  json h = json::object();
  if (!file.metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : file.metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorRecord& r : file.tensors) {
    if (!names.insert(r.name).second) throw SafetensorsError("cannot write: tensor name '" + r.name + "' twice");
    if (r.data.size() != uint64_t(r.numel()) * dtype_size(r.dtype))
      throw SafetensorsError("cannot write tensor '" + r.name + "': data size does not match its shape");
    h[r.name] = {{"dtype", dtype_name(r.dtype)}, {"shape", r.shape}, {"data_offsets", {offset, offset + r.data.size()}}};
    offset += r.data.size();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  out += header;
  for (const TensorRecord& r : file.tensors) out.append(reinterpret_cast<const char*>(r.data.data()), r.data.size());
  return out;
}

void write_safetensors(const std::string& path, const SafetensorsFile& file) {
  const std::string bytes = serialize_safetensors(file);
  try {
    write_file_atomically(path, bytes);
  } catch (const std::runtime_error& e) {
    throw SafetensorsError(e.what());
  }
}

}  // namespace wg
