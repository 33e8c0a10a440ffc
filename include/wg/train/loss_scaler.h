// Dynamic loss scaling for float16 autocast, as upstream's
// torch.amp.GradScaler("cuda") (wg-model.md §10.4): the loss is multiplied
// by the scale before backward, the gradients by its inverse after (both
// exact: the scale is a power of two); a step whose gradients are not all
// finite is skipped and halves the scale (backoff), and every
// growth_interval finite steps in a row double it (growth). Torch's update
// rule, _amp_update_scale_, in float32 as torch keeps the scale:
//   non-finite:  scale ← scale · backoff,  tracker ← 0
//   finite:      tracker + 1 = interval ? (scale ← scale · growth where that
//                is finite, tracker ← 0) : tracker ← tracker + 1
// With bfloat16 or float32 the scaling changes no bit of a gradient (their
// exponent range is float32's), so the trainer scales only under float16
// autocast unless told otherwise (loss_scaling: auto | on | off).
//
// Upstream skips such steps for ever; here a run whose gradients stay
// non-finite while the scale falls below kMinScale (2^-24, float16's
// smallest subnormal: below it no float16 gradient of a finite loss can
// overflow) stops with an error. No LibTorch.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// loss_scaling: "auto" scales under float16 autocast on a GPU; "on" always
// (also on the CPU, where it is exact and only costs two passes); "off" never.
bool loss_scaling_enabled(const std::string& loss_scaling, bool cuda, bool with_mixed_precision,
                          const std::string& attention_dtype);

class LossScaler {
 public:
  static constexpr double kMinScale = 1.0 / 16777216.0;  // 2^-24

  explicit LossScaler(bool enabled, LossScalerOptions options = {});

  bool enabled() const { return enabled_; }
  // The factor the loss is multiplied by (1 when disabled).
  double scale() const { return enabled_ ? scale_ : 1.0; }
  int64_t growth_tracker() const { return tracker_; }
  // Once per optimizer step that ran backward, with whether some gradient
  // (on some rank) was not finite. Returns the scale after the update.
  double update(bool found_nonfinite);
  // Whether the scale fell below kMinScale: the gradients are not finite at
  // any scale.
  bool exhausted() const { return enabled_ && scale_ < kMinScale; }
  // Whether a checkpoint's values can be restored: scale > 0 and finite,
  // tracker in [0, growth_interval).
  bool accepts(double scale, int64_t growth_tracker) const;
  // A checkpoint's values (throws std::invalid_argument unless accepted).
  void restore(double scale, int64_t growth_tracker);
  // Back to the initial scale, no finite steps counted (a checkpoint
  // written without scaling).
  void reset();

 private:
  bool enabled_;
  LossScalerOptions options_;
  double scale_;
  int64_t tracker_ = 0;
};

}  // namespace wg
