// WeatherGenerator's MLP (wg-model.md §4.1): layers.0 a pre-norm (affine
// LayerNorm, or AdaLayerNorm when dim_aux > 0), layers.1 Linear(d, f·d),
// layers.2 GELU (exact), layers.3 Dropout, layers.4 Linear(f·d, d_out);
// with a residual, x + MLP(x). The two products go through fused_linear
// (lean_ops.h): with Saving::Lean only x and the first product's output are
// kept, the norm, GELU and dropout run again in backward.
#pragma once

#include <torch/torch.h>

#include "wg/model/norms.h"
#include "wg/model/saving.h"

namespace wg {

struct MlpOptions {
  int64_t dim_in = 0;
  int64_t dim_out = 0;      // 0: dim_in
  double hidden_factor = 2;
  double dropout = 0.0;
  bool with_residual = true;
  double norm_eps = 1e-5;
  int64_t dim_aux = 0;      // > 0: AdaLayerNorm pre-norm conditioned on aux
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const MlpOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& aux = {}, Saving saving = Saving::All);

 private:
  MlpOptions o_;
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  AdaLayerNorm ada_norm_{nullptr};
  torch::nn::Linear l1_{nullptr}, l2_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace wg
