// WeatherGenerator's learning-rate schedule: warm-up from lr_start to lr_max,
// a decay phase (constant at lr_max, or linear/cosine to lr_final_decay), and
// a cool-down to lr_final over the last lr_steps_cooldown steps. The peak
// levels (lr_max, lr_final_decay) scale with the number of data-parallel
// ranks by lr_scaling_policy (none, linear, sqrt).
#pragma once

#include <cstdint>

#include "wg/config/config.h"

namespace wg {

class LrSchedule {
 public:
  // Throws std::invalid_argument when warm-up + cool-down exceed total_steps.
  LrSchedule(const LrConfig& config, int64_t total_steps, int world_size = 1);

  double at(int64_t step) const;  // step in [0, total_steps)
  double scale() const { return scale_; }
  int64_t total_steps() const { return total_; }

 private:
  LrConfig c_;
  int64_t total_;
  double scale_;
  double lr_max_;
  double lr_final_decay_;
};

}  // namespace wg
