// The weight average (see header).
#include "wg/train/ema.h"

#include <algorithm>
#include <cmath>

namespace wg {

double ema_beta(int64_t step, int64_t n, double halflife, double ramp) {
  const double cur = double(step) * double(n);
  const double h = std::min(halflife, cur / 1e3 * ramp);
  return std::pow(0.5, double(n) / std::max(h * 1e3, 1e-6));
}

WeightAverage::WeightAverage(const std::vector<torch::Tensor>& params, int64_t samples_per_step, double halflife,
                             double ramp)
    : samples_per_step_(samples_per_step), halflife_(halflife), ramp_(ramp) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) ema_.push_back(p.detach().clone());
}

void WeightAverage::update(const std::vector<torch::Tensor>& params, int64_t step) {
  torch::NoGradGuard no_grad;
  const double weight = 1.0 - ema_beta(step, samples_per_step_, halflife_, ramp_);
  for (size_t i = 0; i < ema_.size(); ++i) ema_[i].lerp_(params[i], weight);
}

void WeightAverage::swap_with(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ema_.size(); ++i) {
    const torch::Tensor live = params[i].detach().clone();
    params[i].detach().copy_(ema_[i]);
    ema_[i].copy_(live);
  }
}

}  // namespace wg
