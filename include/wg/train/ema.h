// The exponential moving average of the weights (WeatherGenerator's
// EMAModel, wg-model.md §9.4): after every optimizer step (also a skipped
// one), with N = batch_size_per_gpu · ranks and cur = step · N,
//   h = min(halflife_in_thousands, cur / 1000 · ramp_up_ratio)
//   β = 0.5 ^ (N / max(1000 · h, 1e-6)),  p_ema ← lerp(p_ema, p, 1 − β).
// Validation runs on the averaged weights (swap in, validate, swap back).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace wg {

// β after optimizer step `step` (0-based).
double ema_beta(int64_t step, int64_t samples_per_step, double halflife_in_thousands, double ramp_up_ratio);

class WeightAverage {
 public:
  // A copy of `params` now (upstream: loaded from the live model's state_dict).
  WeightAverage(const std::vector<torch::Tensor>& params, int64_t samples_per_step, double halflife_in_thousands,
                double ramp_up_ratio);

  void update(const std::vector<torch::Tensor>& params, int64_t step);
  const std::vector<torch::Tensor>& averaged() const { return ema_; }
  std::vector<torch::Tensor>& averaged() { return ema_; }
  // Exchanges the values of `params` and the average (twice restores both).
  void swap_with(const std::vector<torch::Tensor>& params);

 private:
  std::vector<torch::Tensor> ema_;
  int64_t samples_per_step_;
  double halflife_, ramp_;
};

}  // namespace wg
