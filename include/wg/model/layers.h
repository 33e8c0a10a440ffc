// Small building blocks shared by the sections: RMSNorm (the read-out norm
// when norm_type is RMSNorm) and the harmonic positional encoding of the
// embed transformer. Attention is in attention.h, the MLP in mlp.h, the
// other norms in norms.h.
#pragma once

#include <torch/torch.h>

namespace wg {

// RMSNorm with a learned scale: x * rsqrt(mean(x^2) + eps) * weight.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  double eps_;
  torch::Tensor weight;
};
TORCH_MODULE(RMSNorm);

// pe[p, 2i] = sin(p * exp(-2i ln(10000) / dim)), pe[p, 2i+1] = cos(same).
torch::Tensor harmonic_encoding(int64_t length, int64_t dim, const torch::TensorOptions& options);

}  // namespace wg
