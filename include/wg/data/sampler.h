// Which samples a rank trains on at a given step. Deterministic: a function
// of (seed, mini-epoch, step, rank).
//
// Every mini-epoch draws a fresh permutation of its samples_per_mini_epoch
// sample ids (ids are disjoint across mini-epochs: epoch e owns
// [e*S, (e+1)*S)). Step k consumes positions [k*G, (k+1)*G) of that
// permutation, G = batch_size_per_gpu * world; rank r takes the contiguous
// chunk [k*G + r*b, k*G + (r+1)*b). So ranks see disjoint samples, and two
// ranks with batch b see exactly the samples of one rank with batch 2b.
#pragma once

#include <cstdint>
#include <vector>

namespace wg {

class Sampler {
 public:
  // Throws std::invalid_argument if one global batch does not fit an epoch.
  Sampler(uint64_t seed, int64_t samples_per_mini_epoch, int batch_per_rank, int world);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::vector<int64_t> sample_ids(int64_t epoch, int64_t step_in_epoch, int rank) const;

 private:
  uint64_t seed_;
  int64_t samples_;
  int batch_;
  int world_;
  int64_t steps_per_epoch_;
};

}  // namespace wg
