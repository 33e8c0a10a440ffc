// Norms of WeatherGenerator's model (wg-model.md §4.2, §6.2): the plain
// layer norm without affine parameters used before attention and on q/k,
// and AdaLayerNorm, a layer norm modulated per row by an embedding of
// auxiliary values (the prediction engine's target coordinates, the
// forecast engine's step).
#pragma once

#include <torch/torch.h>

#include "wg/model/lean_ops.h"

namespace wg {

// LN_eps(x) over the last dimension, no affine parameters.
torch::Tensor plain_layer_norm(const torch::Tensor& x, double eps);

// LN_eps(x) over the last dimension as torch::layer_norm runs it (affine
// when weight and bias are given), with the row stats its backward reads:
// for backward passes written by hand that must match autograd's bit for bit.
struct LayerNormRun {
  torch::Tensor out, mean, rstd;
};
LayerNormRun layer_norm_run(const torch::Tensor& x, double eps, const torch::Tensor& weight = {},
                            const torch::Tensor& bias = {});
// dx of plain_layer_norm at x from dy: the kernel its autograd backward calls.
torch::Tensor plain_layer_norm_backward(const torch::Tensor& dy, const torch::Tensor& x, const LayerNormRun& run);

// AdaLayerNorm(d, a): embed_aux.0 = Linear(a, 4a), embed_aux.1 = SiLU,
// embed_aux.2 = Linear(4a, 2d); y = LN_eps(x) * (1 + scale) + shift with
// [scale, shift] = embed_aux(aux) split in halves.
class AdaLayerNormImpl : public torch::nn::Module {
 public:
  AdaLayerNormImpl(int64_t dim, int64_t dim_aux, double eps);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& aux);  // x [..., d], aux [..., a]
  // The norm as the prelude of a product: embed_aux(aux) runs now, LN ·
  // (1 + scale) + shift in the prelude. Lean, embed_aux keeps aux and runs
  // its first product (a -> 4a) again in backward instead of keeping its
  // 4a-wide output; no other product is run again.
  Prelude prelude(const torch::Tensor& aux, Saving saving);

 private:
  int64_t dim_;
  double eps_;
  torch::nn::ModuleList embed_aux{nullptr};
  torch::nn::Linear in_{nullptr}, out_{nullptr};
};
TORCH_MODULE(AdaLayerNorm);

}  // namespace wg
