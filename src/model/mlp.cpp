// The MLP (see header).
#include "wg/model/mlp.h"

#include "wg/model/lean_ops.h"

namespace wg {

MlpImpl::MlpImpl(const MlpOptions& o) : o_(o) {
  if (o_.dim_out == 0) o_.dim_out = o_.dim_in;
  const int64_t hidden = int64_t(double(o_.dim_in) * o_.hidden_factor);
  layers = register_module("layers", torch::nn::ModuleList());
  if (o_.dim_aux > 0) {
    ada_norm_ = AdaLayerNorm(o_.dim_in, o_.dim_aux, o_.norm_eps);
    layers->push_back(ada_norm_);
  } else {
    norm_ = torch::nn::LayerNorm(torch::nn::LayerNormOptions({o_.dim_in}).eps(o_.norm_eps));
    layers->push_back(norm_);
  }
  l1_ = torch::nn::Linear(o_.dim_in, hidden);
  dropout_ = torch::nn::Dropout(o_.dropout);
  l2_ = torch::nn::Linear(hidden, o_.dim_out);
  layers->push_back(l1_);
  layers->push_back(torch::nn::GELU());
  layers->push_back(dropout_);
  layers->push_back(l2_);
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x, const torch::Tensor& aux, Saving saving) {
  const Prelude norm = ada_norm_ ? ada_norm_->prelude(aux, saving)
                                 : layer_norm_prelude(o_.norm_eps, norm_->weight, norm_->bias);
  const Prelude activation = gelu_dropout_prelude(o_.dropout, is_training());
  const torch::Tensor u = fused_linear(x, norm, {l1_->weight}, {l1_->bias}, saving);
  const torch::Tensor y = output_linear(u, activation, {l2_->weight}, {l2_->bias}, saving);
  if (!o_.with_residual) return y;
  if (y.size(-1) == x.size(-1)) return x + y;
  std::vector<int64_t> reps(size_t(x.dim()), 1);  // widths that divide: x tiled along the last dimension
  reps.back() = y.size(-1) / x.size(-1);
  return y + x.repeat(reps);
}

}  // namespace wg
