// RMSNorm and the harmonic positional encoding (see header).
#include "wg/model/layers.h"

#include <cmath>

namespace wg {

RMSNormImpl::RMSNormImpl(int dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_) * weight;
}

torch::Tensor harmonic_encoding(int64_t length, int64_t dim, const torch::TensorOptions& options) {
  // In the dtype of the activations, op for op as upstream (float32 here).
  torch::Tensor pos = torch::arange(0, length, options).unsqueeze(1);                                   // [L, 1]
  torch::Tensor div = torch::exp(torch::arange(0, dim, 2, options) * -(std::log(10000.0) / double(dim)));  // [ceil(D/2)]
  torch::Tensor pe = torch::zeros({length, dim}, options);
  using torch::indexing::Slice;
  pe.index_put_({Slice(), Slice(0, torch::indexing::None, 2)}, torch::sin(pos * div));
  pe.index_put_({Slice(), Slice(1, torch::indexing::None, 2)}, torch::cos(pos * div.slice(0, 0, dim / 2)));
  return pe;
}

}  // namespace wg
