// Synthetic stream source: smooth, correlated multi-channel fields on a
// latitude-longitude grid. Each channel is a fixed mix of a few waves shared
// by all channels (half standing, half travelling), plus white noise, offset
// and scaled per channel; so a masked token is predictable from where it is,
// from its neighbours in space and from the other channels. Fully determined by (seed, stream
// name, sample id). Values come out normalised by the channel's exact mean
// and standard deviation.
#pragma once

#include <cstdint>
#include <vector>

#include "wg/config/config.h"

namespace wg {

class SyntheticStream {
 public:
  SyntheticStream(const StreamConfig& stream, uint64_t seed);

  int tokens() const { return cfg_.grid_lat * cfg_.grid_lon; }
  int token_size() const { return token_size_; }
  int channels() const { return cfg_.num_channels; }

  // Appends sample `id`: tokens()*token_size()*channels() normalised values
  // ([T, token_size, C]) and tokens()*kCentroidFeatures centroid features.
  void sample(int64_t id, std::vector<float>& values, std::vector<float>& centroids) const;

  // Raw (unnormalised) channel statistics, exact.
  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& stdev() const { return stdev_; }

 private:
  struct Wave {
    double kx, ky, omega, phase;  // lon, lat wavenumbers; cycles/day; phase
  };
  SyntheticConfig cfg_;
  int token_size_;
  uint64_t seed_;
  std::vector<Wave> waves_;
  std::vector<double> mix_;  // [C, K]
  std::vector<double> mean_, stdev_, scale_;
};

// splitmix64: the seed mixer used by all deterministic draws of the data layer.
uint64_t mix_seed(uint64_t a, uint64_t b);
uint64_t hash_name(const std::string& name);

}  // namespace wg
