// Norms (see header).
#include "wg/model/norms.h"

namespace wg {

torch::Tensor plain_layer_norm(const torch::Tensor& x, double eps) {
  return torch::layer_norm(x, {x.size(-1)}, {}, {}, eps);
}

AdaLayerNormImpl::AdaLayerNormImpl(int64_t dim, int64_t dim_aux, double eps) : dim_(dim), eps_(eps) {
  in_ = torch::nn::Linear(dim_aux, 4 * dim_aux);
  out_ = torch::nn::Linear(4 * dim_aux, 2 * dim);
  embed_aux = register_module("embed_aux", torch::nn::ModuleList(in_, torch::nn::SiLU(), out_));
}

torch::Tensor AdaLayerNormImpl::forward(const torch::Tensor& x, const torch::Tensor& aux) {
  const torch::Tensor z = out_(torch::silu(in_(aux)));
  const auto halves = z.split(dim_, -1);  // scale, shift
  return plain_layer_norm(x, eps_) * (1 + halves[0]) + halves[1];
}

}  // namespace wg
