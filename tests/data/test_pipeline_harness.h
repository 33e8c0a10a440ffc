// The C++ ↔ numpy comparison harness of the pipeline tests: a fixture is
// point sets plus cases; the C++ side tokenises, masks and selects targets
// (its masks and draws are written next to the inputs), the reference
// (tests/data/pipeline_reference.py) runs once over all cases, and every
// output is compared: cells, in-cell order, token boundaries, token rows,
// centroids, target points / values / coordinates / times, all counts and
// the batch layouts.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "test_pipeline_io.h"
#include "wg/data/batch_layout.h"
#include "wg/data/healpix.h"
#include "wg/data/masking.h"
#include "wg/data/stream_sample.h"
#include "wg/data/targets.h"
#include "wg/data/tokenizer.h"

namespace wg::testing_io {

struct FixtureCase {
  std::string name;
  std::string points;          // point set name
  std::string source, target;  // data array names of that point set
  bool forecast = false;
  int token_size = 8;
  bool spacetime = true;
  MaskingConfig masking;  // masking mode; strategy must be resolved (not combination)
  double sampling_rate_target = 1.0;
  int64_t max_num_targets = -1;
  uint64_t sample_id = 0;
};

// What the C++ side produced for one case.
struct CaseResult {
  TokenPartition partition;
  TokenMask mask;
  StreamSample sample;  // source fields and targets[0]
  TargetSelection selection;
};

class PipelineFixture {
 public:
  PipelineFixture(const std::string& name, int level) : scratch_(name), dir_(scratch_.path()), grid_(level) {}

  const HealpixGrid& grid() const { return grid_; }
  const fs::path& dir() const { return dir_; }
  int64_t window_start = 1262304000;  // 2010-01-01 00:00 UTC

  // Point set with named data arrays (each [N, n]); all share coordinates.
  void add_points(const std::string& name, PointSet coords, std::map<std::string, std::vector<float>> data,
                  std::map<std::string, int> widths);
  void add_case(const FixtureCase& c) { cases_.push_back(c); }
  // One layout: samples[b][s] are case names (each one stream of one sample).
  void add_layout(const std::string& name, std::vector<std::vector<std::string>> samples) {
    layouts_.push_back({name, std::move(samples)});
  }

  // Runs the C++ side for every case, writes inputs + draws, runs the reference.
  bool run();
  // Compares everything; returns the number of cases compared.
  void compare_all();

  const CaseResult& result(const std::string& name) const { return results_.at(name); }
  const PointSet& points(const std::string& set, const std::string& data) const { return sets_.at(set + "/" + data); }

 private:
  CaseResult run_case(const FixtureCase& c, std::string& manifest_entry);
  void compare_case(const FixtureCase& c);
  void compare_layout(const std::string& name, const std::vector<std::vector<std::string>>& samples);
  template <typename T>
  std::vector<T> ref(const std::string& file) const {
    return npy::read<T>(dir_ / file);
  }

  ScratchDir scratch_;
  fs::path dir_;
  HealpixGrid grid_;
  std::map<std::string, PointSet> sets_;  // "set/data" → point set with that data
  std::map<std::string, std::string> set_manifest_;
  std::vector<FixtureCase> cases_;
  std::vector<std::pair<std::string, std::vector<std::vector<std::string>>>> layouts_;
  std::map<std::string, CaseResult> results_;
};

// Grids and fixtures (test_pipeline_grids.cpp).
PointSet o96_grid(int num_dates, int64_t first_time, int64_t step);  // time-major
PointSet quarter_degree_grid(int64_t time);                          // 721 × 1440, both poles
PointSet obs_points(int n, int num_geoinfos, int64_t window_start, uint64_t seed);
std::vector<float> random_channels(size_t n_points, int n_channels, uint64_t seed, double nan_fraction);

}  // namespace wg::testing_io
