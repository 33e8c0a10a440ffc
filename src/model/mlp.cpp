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
  Prelude norm;
  if (ada_norm_) {
    AdaLayerNorm ada = ada_norm_;
    norm.fn = [ada, aux](const torch::Tensor& t) mutable { return ada(t, aux); };
    norm.params = ada_norm_->parameters();
    if (aux.defined() && aux.requires_grad()) norm.params.push_back(aux);
  } else {
    torch::nn::LayerNorm ln = norm_;
    norm.fn = [ln](const torch::Tensor& t) mutable { return ln(t); };
    norm.params = norm_->parameters();
  }
  Prelude activation;
  torch::nn::Dropout dropout = dropout_;
  activation.fn = [dropout](const torch::Tensor& t) mutable { return dropout(torch::gelu(t)); };
  activation.draws_random = o_.dropout > 0 && is_training();
  const torch::Tensor u = fused_linear(x, norm, {l1_->weight}, {l1_->bias}, saving);
  const torch::Tensor y = fused_linear(u, activation, {l2_->weight}, {l2_->bias}, saving);
  if (!o_.with_residual) return y;
  if (y.size(-1) == x.size(-1)) return x + y;
  std::vector<int64_t> reps(size_t(x.dim()), 1);  // widths that divide: x tiled along the last dimension
  reps.back() = y.size(-1) / x.size(-1);
  return y + x.repeat(reps);
}

}  // namespace wg
