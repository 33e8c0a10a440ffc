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

// AdaLayerNorm(d, a): embed_aux.0 = Linear(a, 4a), embed_aux.1 = SiLU,
// embed_aux.2 = Linear(4a, 2d); y = LN_eps(x) * (1 + scale) + shift with
// [scale, shift] = embed_aux(aux) split in halves.
class AdaLayerNormImpl : public torch::nn::Module {
 public:
  AdaLayerNormImpl(int64_t dim, int64_t dim_aux, double eps);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& aux);  // x [..., d], aux [..., a]
  // The norm as the prelude of a product: embed_aux(aux) runs now (its
  // second product keeping what `saving` says), LN · (1 + scale) + shift
  // in the prelude, so a lean product runs no matrix product again.
  Prelude prelude(const torch::Tensor& aux, Saving saving);

 private:
  int64_t dim_;
  double eps_;
  torch::nn::ModuleList embed_aux{nullptr};
  torch::nn::Linear in_{nullptr}, out_{nullptr};
};
TORCH_MODULE(AdaLayerNorm);

}  // namespace wg
