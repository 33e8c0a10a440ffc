// The safetensors format, hand-written (no Debian package exists):
//   [8 bytes: header length N, little-endian u64]
//   [N bytes: JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
//                   "__metadata__": {string: string}}, space-padded]
//   [data buffer: every tensor's raw little-endian bytes, offsets relative
//    to the buffer's start, no holes, no overlaps]
// Reading validates everything before returning anything: a file either
// loads whole or fails with one SafetensorsError naming the file and the
// tensor. No LibTorch here; io/weights.h maps records to tensors.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace wg {

enum class DType { F32, F16, BF16, F64, I64, U8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// Throws std::invalid_argument for names other than F32 F16 BF16 F64 I64 U8.
DType dtype_from_name(const std::string& name);

struct TensorRecord {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // numel * dtype_size bytes
  int64_t numel() const;
};

struct SafetensorsFile {
  std::vector<TensorRecord> tensors;  // in file order (by data offset)
  std::map<std::string, std::string> metadata;
  const TensorRecord* find(const std::string& name) const;
};

class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

SafetensorsFile read_safetensors(const std::string& path);
// `what` names the source in error messages (a path, usually).
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what);

// Writes atomically: a temporary file beside `path`, then rename.
void write_safetensors(const std::string& path, const SafetensorsFile& file);
std::string serialize_safetensors(const SafetensorsFile& file);

}  // namespace wg
