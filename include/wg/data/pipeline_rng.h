// The random generator of the masking / target pipeline. Not numpy's: every
// draw is keyed by (seed, mini_epoch, sample id, stream, purpose, index), so a
// sample's masks and target subsets are the same on every run, whatever the
// number of ranks or loader workers and whatever order samples are built in.
//
// Generator: xoshiro256** (Blackman & Vigna), its 256-bit state filled by
// splitmix64 from a key hash; the key words are folded in one at a time with
// splitmix64's finaliser, so neighbouring keys give unrelated streams.
// Draws:
// - uniform(): (next >> 11) · 2^−53, in [0, 1).
// - normal():  Box–Muller, sqrt(−2 ln(1 − u1)) · cos(2π u2), one normal per
//   two uniforms (the sine half is not kept, so a draw never depends on
//   earlier calls). Uses glibc log/cos: bit-identical across runs and ranks
//   of one build; another libm may differ in the last ulp.
// - below(n): Lemire's unbiased multiply-shift with rejection, in [0, n).
// - permutation / choice: Fisher–Yates from the back (i = n−1 … 1, j =
//   below(i + 1)); choice(n, k) is the first k of a partial Fisher–Yates
//   from the front.
// The sample id must be global (e.g. the window index of the sample), never
// a rank- or worker-local counter.
#pragma once

#include <cstdint>
#include <vector>

namespace wg {

// What a stream of draws is for; part of the key so purposes never share draws.
enum class RngPurpose : uint64_t {
  Strategy = 1,        // combination: the strategy of a (sample, stream) or of a sample
  Mask = 2,            // masking rate and the mask itself
  TargetSampling = 3,  // sampling_rate_target (index = forecast step)
  TargetCap = 4,       // max_num_targets cell order (index = forecast step)
  ForecastOrder = 5,   // forecast mode: per-cell target order (index = forecast step)
};

// Stream index used for draws made once per sample (same_strategy_per_batch).
constexpr uint64_t kAllStreams = ~uint64_t{0};

class PipelineRng {
 public:
  PipelineRng(uint64_t seed, uint64_t mini_epoch, uint64_t sample_id, uint64_t stream, RngPurpose purpose,
              uint64_t index = 0);

  uint64_t next_u64();
  double uniform();
  double normal();
  uint64_t below(uint64_t n);
  std::vector<int64_t> permutation(int64_t n);
  void shuffle(int64_t* begin, int64_t n);
  // k distinct values of [0, n), in draw order.
  std::vector<int64_t> choice(int64_t n, int64_t k);

 private:
  uint64_t s_[4];
};

}  // namespace wg
