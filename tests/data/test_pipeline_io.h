// Test helpers for the data-pipeline tests: .npy files (the exchange format
// with tests/data/pipeline_reference.py), running the reference through
// WG_PYTHON3, a per-test scratch directory, and array comparisons that
// report the first mismatch.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

// The reference runs through Debian's python3 from the scripts directory
// tests/data (CMake passes both); WG_DATA_SCRIPTS has no sensible default.
#ifndef WG_PYTHON3
#define WG_PYTHON3 "/usr/bin/python3"
#endif
#ifndef WG_DATA_SCRIPTS
#error "define WG_DATA_SCRIPTS (the tests/data directory) for the data-pipeline tests"
#endif

namespace wg::testing_io {

namespace fs = std::filesystem;

template <typename T>
const char* npy_descr() {
  if constexpr (std::is_same_v<T, float>) return "<f4";
  if constexpr (std::is_same_v<T, double>) return "<f8";
  if constexpr (std::is_same_v<T, int64_t>) return "<i8";
  if constexpr (std::is_same_v<T, int32_t>) return "<i4";
  if constexpr (std::is_same_v<T, uint8_t>) return "|u1";
  return "";
}

template <typename T>
void write_npy(const fs::path& path, const std::vector<T>& data, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(data.size())};
  std::string sh = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    sh += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  sh += ")";
  std::string header =
      std::string("{'descr': '") + npy_descr<T>() + "', 'fortran_order': False, 'shape': " + sh + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(T)));
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

// Reads a C-order .npy of dtype T (checked); shape returned in *shape.
template <typename T>
std::vector<T> read_npy(const fs::path& path, std::vector<int64_t>* shape = nullptr) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path.string());
  char magic[8];
  f.read(magic, 8);
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint16_t h = 0;
    f.read(reinterpret_cast<char*>(&h), 2);
    hlen = h;
  } else {
    f.read(reinterpret_cast<char*>(&hlen), 4);
  }
  std::string header(hlen, ' ');
  f.read(header.data(), hlen);
  if (header.find(std::string("'") + npy_descr<T>() + "'") == std::string::npos) {
    throw std::runtime_error(path.string() + ": dtype is not " + npy_descr<T>() + ": " + header);
  }
  if (header.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error(path.string() + ": not C order");
  std::vector<int64_t> sh;
  const size_t a = header.find('(', header.find("'shape'"));
  const size_t b = header.find(')', a);
  std::stringstream ss(header.substr(a + 1, b - a - 1));
  std::string tok;
  int64_t count = 1;
  while (std::getline(ss, tok, ',')) {
    if (tok.find_first_not_of(' ') == std::string::npos) continue;
    sh.push_back(std::stoll(tok));
    count *= sh.back();
  }
  std::vector<T> data(static_cast<size_t>(count));
  f.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(T)));
  if (!f) throw std::runtime_error(path.string() + ": short file");
  if (shape) *shape = sh;
  return data;
}

// A fresh directory under the test temp dir, removed again unless the test
// failed (then its inputs and the reference's outputs stay for inspection).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(fs::path(::testing::TempDir()) / ("wg_pipeline_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    if (::testing::Test::HasFailure()) {
      std::fprintf(stderr, "kept %s\n", path_.c_str());
    } else {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }
  operator const fs::path&() const { return path_; }

 private:
  fs::path path_;
};

// Runs tests/data/pipeline_reference.py with `args`; fails the test on error.
inline bool run_reference(const std::string& args) {
  const std::string cmd = std::string(WG_PYTHON3) + " " + WG_DATA_SCRIPTS + "/pipeline_reference.py " + args;
  const int rc = std::system(cmd.c_str());
  if (rc != 0)
    ADD_FAILURE() << "reference failed (" << rc << "): " << cmd
                  << "\n(needs Debian's python3-numpy and python3-astropy-healpix)";
  return rc == 0;
}

// Exact equality of two integer arrays; reports the first difference.
template <typename A, typename B>
::testing::AssertionResult same_ints(const std::vector<A>& got, const std::vector<B>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs reference " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (static_cast<int64_t>(got[i]) != static_cast<int64_t>(want[i])) {
      return ::testing::AssertionFailure() << "index " << i << ": " << static_cast<int64_t>(got[i]) << " vs reference "
                                           << static_cast<int64_t>(want[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

// |got − want| ≤ atol elementwise, NaN only where the reference has NaN.
template <typename T>
::testing::AssertionResult near_all(const std::vector<T>& got, const std::vector<T>& want, double atol,
                                    int64_t row_width = 1) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs reference " << want.size();
  }
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool gn = std::isnan(static_cast<double>(got[i]));
    const bool wn = std::isnan(static_cast<double>(want[i]));
    const double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (gn != wn || (!gn && !(d <= atol))) {
      return ::testing::AssertionFailure() << "element " << i << " (row " << static_cast<int64_t>(i) / row_width
                                           << ", col " << static_cast<int64_t>(i) % row_width << "): " << got[i]
                                           << " vs reference " << want[i] << " (atol " << atol << ")";
    }
    if (!gn) worst = std::max(worst, d);
  }
  return ::testing::AssertionSuccess() << "max abs diff " << worst;
}

}  // namespace wg::testing_io
