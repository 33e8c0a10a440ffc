// The training data of a run: one source per stream (synthetic, or an
// anemoi Zarr store), the sampler and the masking, assembled into host
// batches; and the validation batches.
//
// Sample ids come from the Sampler (disjoint across ranks, deterministic).
// Synthetic streams generate sample `id` directly. When a run has anemoi
// streams, id maps to a time window: the windows of the training period that
// every anemoi stream has (none missing), in a fixed order shuffled by the
// seed; sample id reads window order[id mod count], so all streams of a
// sample share its time.
//
// Validation (samples_per_validation > 0): validation_steps() batches per
// rank, the ranks' shares disjoint, masked at masking_rate without sampling.
// Synthetic streams use ids of their own (never training ids); anemoi
// streams use the windows of the validation period (start_date_val ..
// end_date_val), spread evenly over it.
//
// Skip policy: if a window cannot be read twice in a row (a corrupt or
// truncated chunk), the sample takes the next window of its list instead,
// with a warning naming store, chunk and date; the window is not tried again
// and skipped_samples() counts the replacement. After 32 unreadable windows
// in a row the batch fails with DataError.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/anemoi.h"
#include "wg/data/batch.h"
#include "wg/data/sampler.h"
#include "wg/data/synthetic.h"

namespace wg {

class Dataset {
 public:
  // Opens every stream's source. Throws std::invalid_argument for a world
  // size the configuration cannot use, DataError for unusable data.
  Dataset(const Config& config, int rank, int world);

  // Per stream of config.streams, in order: what the model is built for
  // (an anemoi stream's channels come from its store).
  const std::vector<StreamShape>& stream_shapes() const { return shapes_; }

  int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  int64_t total_steps() const { return steps_per_epoch() * num_epochs_; }

  // The rank's batch for global step `step` (0-based over the whole run).
  // `masking_rate` >= 0 replaces every stream's rate, without sampling.
  // Thread-safe.
  Batch batch(int64_t step, double masking_rate = -1) const;

  // Validation batches per rank (0: samples_per_validation is 0), and the
  // rank's batch `index` of them. Thread-safe.
  int64_t validation_steps() const { return validation_steps_; }
  Batch validation_batch(int64_t index) const;

  // The masking rate the memory planner plans for: the configured one, or
  // with masking_rate_sampling a low one (more visible tokens, more memory
  // in the embed section): 2.5 standard deviations of the batch's mean
  // rate below it, i.e. about the 99th percentile of visible tokens.
  double planning_masking_rate() const;

  // Training windows available to samples (0 without anemoi streams), a
  // line describing the windows ("" without anemoi streams), and what the
  // caller should warn about (a validation period outside the data, windows
  // repeating within a mini-epoch). The data layer does not log these.
  int64_t windows() const { return int64_t(windows_.size()); }
  const std::string& summary() const { return summary_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

  // Samples replaced so far because their data could not be read (see the
  // skip policy above). Thread-safe.
  int64_t skipped_samples() const;

 private:
  struct Shared;  // state the loader threads share: unreadable windows, counters
  std::vector<StreamConfig> streams_;
  std::vector<StreamShape> shapes_;
  std::vector<std::optional<SyntheticStream>> synthetic_;  // per stream
  std::vector<std::shared_ptr<const AnemoiStream>> anemoi_;  // per stream (null for synthetic)
  std::vector<int64_t> windows_;      // start times of the available training windows, shuffled
  std::vector<int64_t> val_windows_;  // ... of the validation windows, in time order
  Sampler sampler_;
  uint64_t seed_;
  double masking_rate_;
  bool masking_rate_sampling_;
  int num_epochs_;
  int batch_per_rank_;
  int rank_, world_;
  int64_t validation_steps_ = 0;
  std::string summary_;
  std::vector<std::string> warnings_;
  std::shared_ptr<Shared> shared_;

  std::vector<int64_t> available_windows(const TimeWindows& period) const;
  // Reads list[pos mod size] for every anemoi stream, or the next readable
  // window after it (skip policy); returns the window read.
  int64_t read_window(const std::vector<int64_t>& list, int64_t pos, std::vector<std::vector<float>>& values,
                      std::vector<std::vector<uint8_t>>& valid, std::vector<std::vector<float>>& centroids) const;
  // Assembles the batch of `ids`; `positions` index the window list (anemoi).
  Batch assemble(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                 const std::vector<int64_t>& list, double masking_rate, bool sample_rate) const;
};

}  // namespace wg
