// One stream of one sample, as the model consumes it (wg-data.md §4.6, §6.4,
// §7.1; wg-model.md §2): masked source tokens and per-forecast-step targets,
// and the functions that build it from a reader's PointSets.
//
// Invariants:
// - source_tokens are in cell order, then token order; source_lens counts
//   them per cell; NaN never appears in source_tokens (zeroed after masking).
// - targets[f] holds forecast step f (masking mode: one step, the source
//   window). Target arrays are in target order and targets[f].cell_lens
//   counts them per cell.
// - Everything random is keyed by SampleKey (pipeline_rng.h): a StreamSample
//   is a pure function of (inputs, configs, key).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wg/data/healpix.h"
#include "wg/data/masking.h"
#include "wg/data/points.h"
#include "wg/data/targets.h"

namespace wg {

// Per-stream keys of the stream config that the pipeline reads.
struct StreamTokenConfig {
  std::string name;                   // the stream's yaml top key (errors name it)
  int token_size = 8;                 // token_size
  bool tokenize_spacetime = true;     // tokenize_spacetime
  bool diagnostic = false;            // diagnostic: no source tokens
  double sampling_rate_target = 1.0;  // sampling_rate_target (stream key, else the global one)
  int64_t max_num_targets = -1;       // max_num_targets (≤ 0: off)
};

// What keys every random draw of one (sample, stream).
struct SampleKey {
  uint64_t seed = 0;  // run seed (data_loader_rng_seed)
  uint64_t mini_epoch = 0;
  uint64_t sample_id = 0;  // global: the same whatever rank / worker builds it
  uint64_t stream = 0;     // stream index in config order
};

struct StreamSample {
  std::string stream;
  uint64_t sample_id = 0;
  int token_size = 0;
  int source_width = 0;                 // 8 + G + n_src (0 channels: no tokens)
  int num_target_channels = 0;          // n_tgt
  int target_coord_width = 0;           // 105 + G
  std::vector<float> source_tokens;     // [N_s, ts, source_width]
  std::vector<int32_t> source_lens;     // [Ncell] tokens per cell
  std::vector<float> source_centroids;  // [N_s, 5]
  std::vector<StepTargets> targets;     // [forecast steps]
  bool source_is_spoof = false;
  bool target_is_spoof = false;
  MaskStrategy strategy = MaskStrategy::Random;  // masking mode: the strategy used
  double masking_rate = 0.0;                     // masking mode: the rate drawn (1 = all masked)

  int64_t num_source_tokens() const { return static_cast<int64_t>(source_centroids.size()) / kCentroidWidth; }
  // The sampler drops a sample whose streams all have no target (§7.1).
  bool target_empty() const {
    for (const StepTargets& t : targets) {
      if (t.num_points() > 0) return false;
    }
    return true;
  }
};

// Raw (un-normalised) channel means of a stream, used to spoof an empty
// source / target (§3.4).
struct SpoofMeans {
  std::vector<double> source;  // [n_src]
  std::vector<double> target;  // [n_tgt]
};

// Masking mode (§1, §5, §6): source and target read the same window.
// `strategy` is draw_strategy(...) for this (sample, stream); an empty
// source or target PointSet is spoofed from `means`.
StreamSample build_masking_sample(const HealpixGrid& grid, const StreamTokenConfig& cfg, const MaskingConfig& masking,
                                  MaskStrategy strategy, const PointSet& source, const PointSet& target,
                                  int64_t window_start, const SpoofMeans& means, const SampleKey& key);
// The same into `out`, reusing its buffers' capacity: a loader that keeps one
// StreamSample per stream (and copies it into tensors) allocates nothing per
// sample once warm. Every field of `out` is overwritten.
void build_masking_sample(const HealpixGrid& grid, const StreamTokenConfig& cfg, const MaskingConfig& masking,
                          MaskStrategy strategy, const PointSet& source, const PointSet& target, int64_t window_start,
                          const SpoofMeans& means, const SampleKey& key, StreamSample& out);

// Forecast mode (§10): no masking; targets[f] from targets[f] / window_starts[f].
StreamSample build_forecast_sample(const HealpixGrid& grid, const StreamTokenConfig& cfg, const PointSet& source,
                                   int64_t source_window_start, const std::vector<PointSet>& targets,
                                   const std::vector<int64_t>& target_window_starts, const SpoofMeans& means,
                                   const SampleKey& key);

// Source tokens after masking (§4.6): kept tokens (all tokens for channel
// masking, masked channels zeroed), NaN → 0, lens and centroids, written
// into out's source fields (capacity reused). With mask == nullptr every
// token is kept.
void fill_source(const HealpixGrid& grid, const PointSet& points, const TokenPartition& partition,
                 const TokenMask* mask, int64_t window_start, StreamSample& out);

}  // namespace wg
