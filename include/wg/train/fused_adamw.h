#pragma once
// AdamW whose step is one pass over each parameter's memory.
//
// torch::optim::AdamW::step runs nine ATen operations per parameter
// (weight decay, two for each moment, sqrt, divide, add eps, addcdiv), each
// a pass over the parameter's size, two allocating temporaries. FusedAdamW
// IS an AdamW: the same options, per-parameter state (AdamWParamState under
// the same keys, so training_state.h saves and loads it unchanged) and the
// same update, computed element by element in one parallel loop over
// (parameter, gradient, exp_avg, exp_avg_sq). A parameter on a GPU, or not a
// contiguous float32 CPU tensor, takes torch's operations instead. amsgrad
// is not supported (the trainer never sets it).
//
// The update of element i, with step t and the group's lr, betas (β1, β2),
// eps and weight decay wd, in float:
//   p ← p · (1 − lr·wd)
//   m ← β1·m + (1 − β1)·g          v ← β2·v + (1 − β2)·g²
//   p ← p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + eps)
// The result equals torch's within float rounding (the products are not
// rounded in the same places); it does not depend on the thread count.
//
// clip_and_step folds gradient-norm clipping into the same pass: the norm
// of all gradients in one parallel pass (summed in double: gradient_norm),
// then the step with every gradient read scaled by max_norm / (norm + 1e-6)
// when that is below 1 (step_clipped), as torch::nn::utils::clip_grad_norm_
// followed by step() (the gradients are left unscaled). Where a gradient is
// not a contiguous float32 CPU tensor, it runs exactly those two instead.
//
// A parameter without a gradient is skipped: weights, moments and step
// count stay as they are, as torch's AdamW does. clear_gradients() is
// upstream's zero_grad(set_to_none=True) (LibTorch 1.13's zero_grad()
// fills zeros instead, which would decay and move by its momentum a
// parameter the loss did not reach in a step).
#include <torch/optim/adamw.h>

namespace wg {

class FusedAdamW : public torch::optim::AdamW {
 public:
  FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions options);
  torch::Tensor step(LossClosure closure = nullptr) override;
  // The global L2 norm of all gradients (NaN or inf when one is not finite).
  double gradient_norm();
  // The step with the gradients clipped to max_norm, given their norm from
  // gradient_norm().
  void step_clipped(double norm, double max_norm);
  // Both: returns the norm before clipping. Where it is not finite no step
  // is taken (weights, moments and step counts stay as they are), as
  // upstream's GradScaler skips the step (wg-model.md §10.4).
  double clip_and_step(double max_norm);
  // Every parameter's gradient undefined (none), before a step's backward.
  void clear_gradients();
  // Every gradient multiplied by float(1 / scale) in place, as
  // GradScaler.unscale_ does after a backward of the loss times `scale`
  // (wg/train/loss_scaler.h): exact where the scale is a power of two.
  void unscale_gradients(double scale);

 private:
  void step_scaled(double grad_scale);
  std::vector<torch::Tensor> params_with_grad();
};

}  // namespace wg
