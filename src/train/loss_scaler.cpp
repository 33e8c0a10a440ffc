// Dynamic loss scaling (see header).
#include "wg/train/loss_scaler.h"

#include <cmath>
#include <stdexcept>

namespace wg {

bool loss_scaling_enabled(const std::string& loss_scaling, bool cuda, bool with_mixed_precision,
                          const std::string& attention_dtype) {
  if (loss_scaling == "on") return true;
  if (loss_scaling == "off") return false;
  if (loss_scaling != "auto")
    throw std::invalid_argument("loss_scaling: '" + loss_scaling + "' is not one of auto, on, off");
  return cuda && with_mixed_precision && attention_dtype == "fp16";
}

LossScaler::LossScaler(bool enabled, LossScalerOptions options)
    : enabled_(enabled), options_(options), scale_(options.init_scale) {
  if (!(options.init_scale > 0) || !std::isfinite(options.init_scale) || !(options.growth_factor > 1) ||
      !(options.backoff_factor > 0 && options.backoff_factor < 1) || options.growth_interval < 1)
    throw std::invalid_argument(
        "LossScaler: init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and "
        "growth_interval >= 1 are required");
}

double LossScaler::update(bool found_nonfinite) {
  if (!enabled_) return 1.0;
  if (found_nonfinite) {
    scale_ = double(float(scale_ * options_.backoff_factor));
    tracker_ = 0;
  } else if (tracker_ + 1 == options_.growth_interval) {
    const float grown = float(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = double(grown);
    tracker_ = 0;
  } else {
    ++tracker_;
  }
  return scale_;
}

bool LossScaler::accepts(double scale, int64_t growth_tracker) const {
  return scale > 0 && std::isfinite(scale) && growth_tracker >= 0 && growth_tracker < options_.growth_interval;
}

void LossScaler::reset() {
  scale_ = options_.init_scale;
  tracker_ = 0;
}

void LossScaler::restore(double scale, int64_t growth_tracker) {
  if (!accepts(scale, growth_tracker))
    throw std::invalid_argument("loss scale " + std::to_string(scale) + " with growth tracker " +
                                std::to_string(growth_tracker) +
                                ": the scale must be positive and finite, the "
                                "tracker in [0, " +
                                std::to_string(options_.growth_interval) + ")");
  scale_ = scale;
  tracker_ = growth_tracker;
}

}  // namespace wg
