// The data of a run for one rank: every stream's readers, the sample
// builder of the training period (and of the validation period), and the
// sampler that says which samples a rank trains on at each step.
//
// Steps: a mini-epoch has min(windows, samples_per_mini_epoch) samples (as
// upstream's len(dataset)); each step a rank takes batch_size_per_gpu of
// them, the ranks' shares disjoint (wg/data/sampler.h); sample id → window
// by the builder's shuffled window order. Validation (samples_per_validation
// > 0): the validation period's builder, always shuffled (as upstream);
// pass v (after mini-epoch v) takes min(windows, samples_per_validation)
// samples (at least one batch per rank) spread over the ranks in batches of
// batch_size_validation_per_gpu,
// ids v·P … v·P + P − 1 with P its samples, masks of mini-epoch v: each pass
// other windows and masks, as upstream's advancing validation set.
// Thread-safe: batch() and validation_batch() may run on loader threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/sample_builder.h"
#include "wg/data/sampler.h"
#include "wg/data/stream_shape.h"

namespace wg {

class Dataset {
 public:
  // Opens every stream's readers. Throws std::invalid_argument for a world
  // size the configuration cannot use, PipelineError / ReaderError (naming
  // stream, file and key) for unusable data or options.
  Dataset(const Config& config, int rank, int world);

  // Per stream of config.streams, in order: what the model is built for.
  const std::vector<StreamShape>& stream_shapes() const { return shapes_; }

  int64_t steps_per_epoch() const { return sampler_->steps_per_epoch(); }
  int64_t total_steps() const { return steps_per_epoch() * num_epochs_; }
  int64_t samples_per_epoch() const { return samples_per_epoch_; }
  int batch_per_rank() const { return batch_per_rank_; }  // batch_size_per_gpu

  // The rank's batch for global step `step` (0-based over the whole run).
  BuiltBatch batch(int64_t step) const;

  // Validation batches per rank (0: no validation), and batch `index` of
  // validation pass `pass`.
  int64_t validation_steps() const { return validation_steps_; }
  BuiltBatch validation_batch(int64_t index, int64_t pass = 0) const;

  // Training windows (candidate sample starts), a line describing them, and
  // what the caller should warn about. Opening does not log (the caller decides); an unreadable window logs one warning when it is skipped.
  int64_t windows() const { return train_->num_candidates(); }
  const std::string& summary() const { return summary_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

  // Samples that took a later window: unreadable data, or no target (cumulative).
  int64_t skipped_samples() const;
  const SampleBuilder& builder() const { return *train_; }

 private:
  std::vector<StreamShape> shapes_;
  std::unique_ptr<SampleBuilder> train_, validation_;
  std::optional<Sampler> sampler_;
  int num_epochs_ = 1;
  int batch_per_rank_ = 1;
  int validation_batch_per_rank_ = 1;  // batch_size_validation_per_gpu
  int rank_ = 0, world_ = 1;
  int64_t samples_per_epoch_ = 0;
  int64_t validation_steps_ = 0;
  std::string summary_;
  std::vector<std::string> warnings_;
};

}  // namespace wg
