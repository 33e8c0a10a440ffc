// Test helpers for the reader and sample-builder tests: writing fixture
// stores with the Python generators (make_anemoi_grid_store.py,
// make_obs_store.py), running readers_reference.py, bitwise comparisons of
// point sets and stream samples, and catching reader errors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "test_pipeline_io.h"
#include "wg/data/stream_reader.h"
#include "wg/data/stream_sample.h"
#include "wg/util/dates.h"

namespace wg::reader_testing {

namespace fs = std::filesystem;

// Seconds since the epoch of a YYYYMMDDHHMM literal.
inline int64_t at(const char* yyyymmddhhmm) { return *parse_yyyymmddhhmm(yyyymmddhhmm); }

inline std::string script(const std::string& name) { return std::string(WG_DATA_SCRIPTS) + "/" + name; }

// Runs `cmd` (stdout discarded); fails the test on a non-zero exit.
inline bool run_command(const std::string& cmd) {
  const int rc = std::system((cmd + " > /dev/null").c_str());
  if (rc != 0)
    ADD_FAILURE() << "command failed (" << rc << "): " << cmd
                  << "\n(the fixtures need Debian's python3-zarr and python3-numpy: run scripts/setup.sh)";
  return rc == 0;
}

inline bool make_store(const std::string& generator, const fs::path& out, const std::string& args) {
  return run_command(std::string(WG_PYTHON3) + " " + script(generator) + " " + out.string() + " " + args);
}

inline bool run_readers_reference(const std::string& args) {
  return run_command(std::string(WG_PYTHON3) + " " + script("readers_reference.py") + " " + args);
}

// Bit patterns equal (NaN == NaN when its bits are equal).
template <typename T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// Equal values, any NaN equal to any NaN (numpy's NaN payload may differ).
inline ::testing::AssertionResult same_values(const std::vector<float>& got, const std::vector<float>& want,
                                              int64_t width = 1) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs reference " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool gn = std::isnan(got[i]), wn = std::isnan(want[i]);
    if (gn != wn || (!gn && std::memcmp(&got[i], &want[i], sizeof(float)) != 0))
      return ::testing::AssertionFailure() << "element " << i << " (row " << int64_t(i) / width << ", col "
                                           << int64_t(i) % width << "): " << got[i] << " vs reference " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// Every field of two StreamSamples, bit for bit.
inline ::testing::AssertionResult same_sample(const StreamSample& a, const StreamSample& b) {
  auto fail = [](const char* what, const ::testing::AssertionResult& r) {
    return ::testing::AssertionFailure() << what << ": " << r.message();
  };
  if (a.stream != b.stream || a.sample_id != b.sample_id || a.token_size != b.token_size ||
      a.source_width != b.source_width || a.num_target_channels != b.num_target_channels ||
      a.target_coord_width != b.target_coord_width || a.source_is_spoof != b.source_is_spoof ||
      a.target_is_spoof != b.target_is_spoof || a.strategy != b.strategy ||
      std::memcmp(&a.masking_rate, &b.masking_rate, sizeof(double)) != 0)
    return ::testing::AssertionFailure() << "scalar fields differ (stream " << a.stream << ")";
  if (auto r = same_bits(a.source_tokens, b.source_tokens); !r) return fail("source_tokens", r);
  if (auto r = same_bits(a.source_lens, b.source_lens); !r) return fail("source_lens", r);
  if (auto r = same_bits(a.source_centroids, b.source_centroids); !r) return fail("source_centroids", r);
  if (a.targets.size() != b.targets.size()) return ::testing::AssertionFailure() << "target steps differ";
  for (size_t f = 0; f < a.targets.size(); ++f) {
    const StepTargets &x = a.targets[f], &y = b.targets[f];
    if (x.window_start != y.window_start) return ::testing::AssertionFailure() << "target window_start differs";
    if (auto r = same_bits(x.values, y.values); !r) return fail("targets.values", r);
    if (auto r = same_bits(x.coords, y.coords); !r) return fail("targets.coords", r);
    if (auto r = same_bits(x.coords_raw, y.coords_raw); !r) return fail("targets.coords_raw", r);
    if (auto r = same_bits(x.times, y.times); !r) return fail("targets.times", r);
    if (auto r = same_bits(x.cell_lens, y.cell_lens); !r) return fail("targets.cell_lens", r);
  }
  return ::testing::AssertionSuccess();
}

// The what() of the ReaderError `f` throws, or "(no ReaderError)".
inline std::string reader_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ReaderError& e) {
    return e.what();
  }
  return "(no ReaderError)";
}

}  // namespace wg::reader_testing
