// The training data of a run: one source per stream, the sampler, and the
// masking, assembled into host batches. Synthetic streams today; the same
// interface serves file-backed streams.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/batch.h"
#include "wg/data/sampler.h"
#include "wg/data/synthetic.h"

namespace wg {

class Dataset {
 public:
  // Throws std::invalid_argument for a stream type it cannot serve or a world
  // size the configuration cannot use.
  Dataset(const Config& config, int rank, int world);

  int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  int64_t total_steps() const { return steps_per_epoch() * num_epochs_; }

  // The rank's batch for global step `step` (0-based over the whole run).
  // `masking_rate` >= 0 replaces every stream's rate, without sampling.
  Batch batch(int64_t step, double masking_rate = -1) const;

  // The masking rate the memory planner plans for: the configured one, or
  // with masking_rate_sampling a low one (more visible tokens, more memory
  // in the embed section): 2.5 standard deviations of the batch's mean
  // rate below it, i.e. about the 99th percentile of visible tokens.
  double planning_masking_rate() const;

 private:
  std::vector<StreamConfig> streams_;
  std::vector<SyntheticStream> sources_;
  Sampler sampler_;
  uint64_t seed_;
  double masking_rate_;
  bool masking_rate_sampling_;
  int num_epochs_;
  int batch_per_rank_;
  int rank_;
};

}  // namespace wg
