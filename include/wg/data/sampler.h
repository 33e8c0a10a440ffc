// Which samples a rank trains on at a given step, and which of their tokens
// are masked. Deterministic: a function of (seed, mini-epoch, step, rank).
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

// The sampled masking rate (masking_rate_sampling): drawn around the
// configured rate with this spread, clamped to [floor, 1 - floor].
constexpr double kMaskingRateSpread = 0.1;
constexpr double kMaskingRateFloor = 0.05;

// Masks round(rate * tokens) tokens (at least 1, at most tokens-1), chosen
// uniformly by a generator seeded from (seed, sample id, stream). With
// `sample_rate`, the rate itself is drawn around `rate` (std
// kMaskingRateSpread, clamped to [kMaskingRateFloor, 1 - kMaskingRateFloor])
// per sample and stream, as WeatherGenerator's
// masking_rate_sampling does.
std::vector<uint8_t> token_mask(uint64_t seed, int64_t sample_id, uint64_t stream_hash, int tokens,
                                double rate, bool sample_rate);

}  // namespace wg
