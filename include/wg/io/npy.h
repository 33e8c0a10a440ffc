// NumPy .npy files (format 1.0 to write; 1.x and 2.x headers to read), C
// order, little-endian float32/float64/int64/int32/uint8: the exchange
// format with the Python references (tests/data/pipeline_reference.py reads
// and writes them with numpy) for the data tests and bench/tokenize.cpp.
// Header-only, no LibTorch. Errors are std::runtime_error naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace wg::npy {

// The dtype string numpy writes for T ("<f4", ...).
template <typename T>
const char* descr() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int64_t> ||
                    std::is_same_v<T, int32_t> || std::is_same_v<T, uint8_t>,
                "npy: float, double, int64_t, int32_t or uint8_t");
  if constexpr (std::is_same_v<T, float>) return "<f4";
  if constexpr (std::is_same_v<T, double>) return "<f8";
  if constexpr (std::is_same_v<T, int64_t>) return "<i8";
  if constexpr (std::is_same_v<T, int32_t>) return "<i4";
  return "|u1";
}

// Writes data as an array of `shape` ([data.size()] when empty); the
// shape's product must be data.size().
template <typename T>
void write(const std::filesystem::path& path, const std::vector<T>& data, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(data.size())};
  int64_t count = 1;
  std::string sh = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    count *= shape[i];
    sh += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  }
  sh += ")";
  if (count != static_cast<int64_t>(data.size()))
    throw std::runtime_error(path.string() + ": shape " + sh + " does not hold " + std::to_string(data.size()) +
                             " values");
  std::string header = std::string("{'descr': '") + descr<T>() + "', 'fortran_order': False, 'shape': " + sh + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(T)));
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

// Reads a C-order array of dtype T (checked), whose data must fill the
// file exactly; its shape into *shape.
template <typename T>
std::vector<T> read(const std::filesystem::path& path, std::vector<int64_t>* shape = nullptr) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path.string());
  char magic[8] = {};
  f.read(magic, 8);
  if (!f || std::string(magic, 6) != "\x93NUMPY") throw std::runtime_error(path.string() + ": not an .npy file");
  // Format 1.x: a 2-byte header length; 2.x and 3.x (a UTF-8 header): 4.
  const int major = static_cast<unsigned char>(magic[6]);
  if (major < 1 || major > 3) throw std::runtime_error(path.string() + ": .npy format " + std::to_string(major));
  uint32_t hlen = 0;
  if (major == 1) {
    uint16_t h = 0;
    f.read(reinterpret_cast<char*>(&h), 2);
    hlen = h;
  } else {
    f.read(reinterpret_cast<char*>(&hlen), 4);
  }
  std::string header(hlen, ' ');
  f.read(header.data(), hlen);
  if (!f) throw std::runtime_error(path.string() + ": short header");
  // The value after 'descr': exactly this dtype (not a structured one holding it).
  const std::string quoted = std::string("'") + descr<T>() + "'";
  const size_t d = header.find("'descr':");
  const size_t q0 = d == std::string::npos ? d : header.find_first_not_of(' ', d + 8);
  if (q0 == std::string::npos || header.compare(q0, quoted.size(), quoted) != 0)
    throw std::runtime_error(path.string() + ": dtype is not " + descr<T>() + ": " + header);
  if (header.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error(path.string() + ": not C order");
  std::vector<int64_t> sh;
  const size_t a = header.find('(', header.find("'shape'"));
  const size_t b = a == std::string::npos ? a : header.find(')', a);
  if (b == std::string::npos) throw std::runtime_error(path.string() + ": no shape in " + header);
  std::stringstream ss(header.substr(a + 1, b - a - 1));
  std::string tok;
  int64_t count = 1;
  while (std::getline(ss, tok, ',')) {
    if (tok.find_first_not_of(' ') == std::string::npos) continue;
    size_t used = 0;
    int64_t dim = -1;
    try {
      dim = std::stoll(tok, &used);
    } catch (const std::exception&) {
    }
    if (dim < 0 || tok.find_first_not_of(' ', used) != std::string::npos ||
        (dim > 0 && count > std::numeric_limits<int64_t>::max() / 8 / dim))
      throw std::runtime_error(path.string() + ": bad shape in " + header);
    sh.push_back(dim);
    count *= dim;
  }
  // The data must be exactly the shape's values: no fewer, no more.
  const auto start = f.tellg();
  f.seekg(0, std::ios::end);
  const auto bytes = static_cast<int64_t>(f.tellg() - start), need = count * static_cast<int64_t>(sizeof(T));
  f.seekg(start);
  if (bytes != need)
    throw std::runtime_error(path.string() + ": " + std::to_string(bytes) + " bytes of data where its shape needs " +
                             std::to_string(need) + (bytes < need ? " (short file)" : ""));
  std::vector<T> data(static_cast<size_t>(count));
  f.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(T)));
  if (!f) throw std::runtime_error(path.string() + ": short file");
  if (shape) *shape = sh;
  return data;
}

}  // namespace wg::npy
