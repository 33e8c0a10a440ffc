// Test helpers for the data-pipeline tests: wg/io/npy.h (.npy files, the
// exchange format with tests/data/pipeline_reference.py), running the
// reference through WG_PYTHON3, a per-test scratch directory, and array
// comparisons that report the first mismatch.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "wg/io/npy.h"

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
