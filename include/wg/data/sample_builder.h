// Samples of the per-point pipeline (wg-data.md §1, §8, §10): for a sample
// id, the StreamSample of every stream of its time window, and for a batch
// of ids their BatchLayout.
//
// Invariants:
// - Sample id → window: the candidate windows [0, n_win − flen −
//   forecast_offset) (§8.1, flen = floor(len_hrs·(forecast_steps + 1) /
//   step_hrs)) in one order shuffled by the seed (shuffle: true); sample id
//   reads order[id mod count]. Sample ids come from wg::Sampler (global,
//   disjoint across ranks), so every sample is a pure function of (options,
//   data, seed, mini-epoch, sample id): the same on every run, rank count,
//   worker count and thread, bit for bit.
// - Every random draw is keyed by SampleKey{seed, mini_epoch, sample id,
//   stream index}: the strategy (draw_strategy: per (sample, stream), or per
//   sample with same_strategy_per_batch), the mask and the target subsets.
// - Masking mode: source and target of a stream read the sample's window.
//   Forecast mode: the source reads window idx, target step f (f =
//   forecast_offset … forecast_offset + forecast_steps) reads window idx +
//   (len_hrs·f) // step_hrs; targets[f] for f < forecast_offset are empty.
// - An empty source / target (e.g. an obs window without observations) is
//   spoofed (§3.4; source_is_spoof / target_is_spoof: loss weight 0).
// - Skip policy (as wg::Dataset): a window that cannot be read
//   (UnreadableWindow: a missing date, a corrupt chunk; two tries) is
//   remembered and the sample takes the next window of the order, counted by
//   skipped_samples(); a window whose every stream has no target point is
//   dropped likewise (§7.1), counted by dropped_samples(). After
//   max_unreadable_in_a_row windows in a row the sample fails with
//   PipelineError.
// Thread-safe: sample() and batch() may run on several loader threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wg/data/batch_layout.h"
#include "wg/data/healpix.h"
#include "wg/data/pipeline_options.h"
#include "wg/data/stream_reader.h"
#include "wg/data/stream_sample.h"
#include "wg/data/time_windows.h"

namespace wg {

// A stream of the run: its options and its readers (one per file, in file
// order; see open_stream_readers).
struct StreamInput {
  StreamOptions options;
  std::vector<std::shared_ptr<const StreamReader>> readers;
};

struct BuiltSample {
  int64_t sample_id = 0;
  int64_t window = -1;                // the (source) window index read
  int64_t window_start = 0;           // its start, seconds
  int windows_skipped = 0;            // windows passed over before it (skip policy)
  std::vector<StreamSample> streams;  // [S] in stream order
};

struct BuiltBatch {
  std::vector<int64_t> sample_ids;                 // [B]
  std::vector<int64_t> windows;                    // [B] source window index of each sample
  std::vector<std::vector<StreamSample>> samples;  // [B][S]
  BatchLayout layout;                              // layout_batch(samples)
};

class SampleBuilder {
 public:
  // Validates every stream (readers present and alike, masking config
  // against its channels, HEALPix level) and fixes the window order.
  // Throws PipelineError / ReaderError naming the stream and key.
  SampleBuilder(const PipelineOptions& options, std::vector<StreamInput> streams,
                std::shared_ptr<const HealpixGrid> grid);
  ~SampleBuilder();
  SampleBuilder(SampleBuilder&&) noexcept;
  SampleBuilder& operator=(SampleBuilder&&) noexcept;

  const PipelineOptions& options() const { return options_; }
  const TimeWindowHandler& windows() const { return windows_; }
  int64_t num_streams() const { return static_cast<int64_t>(streams_.size()); }
  const StreamInput& stream(int64_t s) const { return streams_[size_t(s)]; }
  // Windows a sample can start at, and their order.
  int64_t num_candidates() const { return static_cast<int64_t>(order_.size()); }
  const std::vector<int64_t>& window_order() const { return order_; }
  // The window sample_id reads unless it is skipped.
  int64_t window_of(int64_t sample_id) const;
  // Forecast target windows of source window `window` (one per step 0 … forecast_offset + forecast_steps).
  std::vector<int64_t> target_windows(int64_t window) const;

  BuiltSample sample(int64_t sample_id, int64_t mini_epoch) const;
  // The same into `out`, reusing its buffers: a loader thread that keeps one
  // BuiltSample (or BuiltBatch) allocates almost nothing per sample once warm.
  void sample(int64_t sample_id, int64_t mini_epoch, BuiltSample& out) const;
  BuiltBatch batch(const std::vector<int64_t>& sample_ids, int64_t mini_epoch) const;
  void batch(const std::vector<int64_t>& sample_ids, int64_t mini_epoch, BuiltBatch& out) const;

  int64_t skipped_samples() const;  // samples that took a later window (unreadable)
  int64_t dropped_samples() const;  // samples that took a later window (no target, §7.1)

 private:
  struct Shared;     // skip-policy state and counters
  struct Workspace;  // per-thread scratch point sets (pooled)
  PipelineOptions options_;
  std::vector<StreamInput> streams_;
  std::shared_ptr<const HealpixGrid> grid_;
  TimeWindowHandler windows_;
  std::vector<int64_t> order_;
  std::unique_ptr<Shared> shared_;

  // All streams at window `window` into out ([S]); throws UnreadableWindow.
  void build_at(int64_t window, int64_t sample_id, int64_t mini_epoch, Workspace& ws,
                std::vector<StreamSample>& out) const;
  // The stream's files at `window` concatenated (§3.3).
  void read_stream(const StreamInput& in, const TimeWindow& window, PointSet* source, PointSet* target,
                   Workspace& ws) const;
};

}  // namespace wg
