// Test helpers of the io suites: a file's bytes, read and written whole.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace wg::io_testing {

inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace wg::io_testing
