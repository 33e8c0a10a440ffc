// Learning-rate schedule (see header). Pure function of the step.
#include "wg/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace wg {

namespace {
constexpr double kPi = 3.14159265358979323846;

// Interpolates from a to b at fraction u in [0,1] along the named policy.
double ramp(const std::string& policy, double a, double b, double u) {
  u = std::clamp(u, 0.0, 1.0);
  if (policy == "linear") return a + (b - a) * u;
  if (policy == "cosine") return a + (b - a) * 0.5 * (1.0 - std::cos(kPi * u));
  throw std::invalid_argument("unknown learning-rate policy '" + policy + "'");
}
}  // namespace

LrSchedule::LrSchedule(const LrConfig& config, int64_t total_steps, int world_size)
    : c_(config), total_(total_steps) {
  if (world_size < 1) throw std::invalid_argument("world size must be >= 1");
  if (c_.lr_scaling_policy == "none") scale_ = 1.0;
  else if (c_.lr_scaling_policy == "linear") scale_ = world_size;
  else if (c_.lr_scaling_policy == "sqrt") scale_ = std::sqrt(static_cast<double>(world_size));
  else throw std::invalid_argument("unknown lr_scaling_policy '" + c_.lr_scaling_policy + "'");
  lr_max_ = c_.lr_max * scale_;
  lr_final_decay_ = c_.lr_final_decay * scale_;
  if (c_.lr_steps_warmup + c_.lr_steps_cooldown > total_)
    throw std::invalid_argument(
        "lr_steps_warmup (" + std::to_string(c_.lr_steps_warmup) + ") + lr_steps_cooldown (" +
        std::to_string(c_.lr_steps_cooldown) + ") exceed the run's " + std::to_string(total_) +
        " steps (num_mini_epochs * samples_per_mini_epoch / global batch)");
  // Validate the policies once, so at() cannot throw mid-run.
  ramp(c_.lr_policy_warmup, 0, 1, 0);
  ramp(c_.lr_policy_cooldown, 0, 1, 0);
  if (c_.lr_policy_decay != "constant") ramp(c_.lr_policy_decay, 0, 1, 0);
}

double LrSchedule::at(int64_t step) const {
  const int64_t warm = c_.lr_steps_warmup, cool = c_.lr_steps_cooldown;
  const int64_t decay_end = total_ - cool;
  if (step < warm) return ramp(c_.lr_policy_warmup, c_.lr_start, lr_max_, double(step) / warm);
  const bool constant = c_.lr_policy_decay == "constant";
  const double decay_floor = constant ? lr_max_ : lr_final_decay_;
  if (step < decay_end) {
    if (constant) return lr_max_;
    const double u = double(step - warm) / double(std::max<int64_t>(1, decay_end - warm));
    // cosine decay starts flat at lr_max: ramp from max down to floor
    return ramp(c_.lr_policy_decay, lr_max_, decay_floor, u);
  }
  const double u = cool > 0 ? double(step - decay_end) / double(cool) : 1.0;
  return ramp(c_.lr_policy_cooldown, decay_floor, c_.lr_final, u);
}

}  // namespace wg
