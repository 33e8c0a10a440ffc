// WeatherGenerator's learning-rate schedule and optimiser constants
// (wg-model.md §10), value for value: its LearningRateScheduler built from
// PyTorch's OneCycleLR / LinearLR / ExponentialLR, emulated here, so the
// quirks a model trained upstream has seen come out by themselves: the
// first step's lr_start²/lr_max', β1 driven by OneCycleLR's momentum
// cycling (0.95 → 0.85, then frozen), the linear warm-up's endpoints.
//
// The schedule is a table over the run's optimizer steps, computed once: a
// pure function of the step, so a resumed run needs only its step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wg/config/config.h"

namespace wg {

// Warm-up, decay and cool-down steps after upstream's short-run
// adjustment (§10.2): when decay would get fewer than 20% of the steps,
// warm-up becomes 10% and cool-down 5% of them.
struct LrPhases {
  int64_t warmup = 0, decay = 0, cooldown = 0;
};
LrPhases lr_phases(const LrConfig& config, int64_t total_steps);

// AdamW's constants from κ = batch_size_per_gpu · ranks (§10.1).
struct AdamConstants {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};
AdamConstants adam_constants(int64_t kappa);

class LrSchedule {
 public:
  // Throws std::invalid_argument for an unknown policy, a cosine decay
  // without cosine warm-up, a non-linear cool-down, lr_final_decay <
  // lr_final, or κ > 80 (β2 would be negative).
  LrSchedule(const LrConfig& config, int64_t total_steps, int64_t kappa);

  // The learning rate and β1 optimizer step `step` uses (0-based; steps past
  // the end keep the last values).
  double at(int64_t step) const;
  double beta1_at(int64_t step) const;
  double scale() const { return scale_; }  // lr_max' / lr_max
  int64_t total_steps() const { return int64_t(lr_.size()); }
  const LrPhases& phases() const { return phases_; }
  // Empty, or why the cool-down does not lower the lr (it rises or stays)
  // and how to make it fall: upstream's chained LinearLR takes the lr it
  // starts from times (lr_final / lr_final_decay) / (lr_start / lr_max'), at
  // least 1 when lr_final >= lr_final_decay · lr_start / lr_max'
  // (docs/upstream-differences.md). The schedule keeps upstream's values.
  const std::string& cooldown_warning() const { return cooldown_warning_; }

 private:
  std::vector<double> lr_, beta1_;
  double scale_ = 1;
  LrPhases phases_;
  std::string cooldown_warning_;
};

}  // namespace wg
