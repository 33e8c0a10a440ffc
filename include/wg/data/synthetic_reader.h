// `type: synthetic` streams as PointSets: travelling-wave fields (a fixed
// mix of K waves per channel, half standing, half
// travelling, plus white noise; per-channel offset and scale) sampled at the
// centres of a grid_lat × grid_lon latitude-longitude grid, so synthetic
// streams go through the same tokeniser as anemoi and obs streams.
//
// Invariants:
// - Deterministic: the waves and channel statistics depend on (seed, stream
//   name); the field at time t (and its noise) on (seed, stream name, t)
//   only, so the same date read by two windows (forecast targets) is the
//   same field, on every run, rank and thread.
// - A window holds the dates t = k·time_step_hours (k integer, hours since
//   1970) with window.start ≤ t < window.end; points time-major, then grid
//   order (latitude rows south → north, longitude in [−180, 180)); no
//   geoinfos; data normalised by the channels' exact raw mean and stdev.
// - Channels are named "synthetic_0" … and selected by the stream's rules
//   like any other stream.
// Thread-safe: read() may run on several threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wg/data/stream_reader.h"

namespace wg {

// The `synthetic:` block of a stream (wg::SyntheticConfig's keys).
struct SyntheticOptions {
  int num_channels = 16;
  int grid_lat = 8;
  int grid_lon = 16;
  int num_waves = 6;
  double noise = 0.05;
  double time_step_hours = 6;
};

class SyntheticReader final : public StreamReader {
 public:
  // Throws ReaderError (file "synthetic") for a non-positive size.
  SyntheticReader(const std::string& stream, const SyntheticOptions& options, const ChannelRules& rules, uint64_t seed);

  const SyntheticOptions& options() const { return opt_; }
  void read(const TimeWindow& window, PointSet* source, PointSet* target) const override;

 private:
  struct Wave {
    double kx, ky, omega, phase;  // lon, lat wavenumbers; cycles per day; phase
  };
  SyntheticOptions opt_;
  uint64_t seed_;
  std::vector<Wave> waves_;
  std::vector<double> mix_;                   // [C, K]
  std::vector<double> mean_, stdev_, scale_;  // [C] raw statistics of every channel
  std::vector<int> src_, tgt_;                // channel index per source / target channel
  std::vector<float> lat_, lon_;              // [grid points]

  // Normalised values of every channel at time t: [grid points, C].
  std::vector<float> field(int64_t t) const;
};

}  // namespace wg
