// Building blocks shared by the sections: the qk-norm multi-head
// self-attention layer and the MLP layer (both pre-norm with residual, so
// each is one checkpointable piece), RMSNorm, and the harmonic positional
// encoding. Parameter names follow WeatherGenerator (see README, Model).
#pragma once

#include <torch/torch.h>

#include <string>

namespace wg {

struct AttentionOptions {
  int dim = 0;
  int num_heads = 1;
  double dropout = 0.0;             // on the attention probabilities, training only
  std::string norm_type = "LayerNorm";  // the pre-norm (no affine parameters)
  bool bf16_on_cuda = true;         // attention matmuls in bf16 on CUDA tensors
};

// x -> x + proj_out(attention(norm(x))), over the second-to-last axis.
// Parameters: proj_heads_q/k/v.weight, proj_out.weight (all bias-free).
class MultiSelfAttentionHeadImpl : public torch::nn::Module {
 public:
  explicit MultiSelfAttentionHeadImpl(const AttentionOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // [B, S, dim] -> [B, S, dim]

 private:
  AttentionOptions o_;
  int dim_head_;
  torch::nn::Linear proj_heads_q{nullptr}, proj_heads_k{nullptr}, proj_heads_v{nullptr}, proj_out{nullptr};
};
TORCH_MODULE(MultiSelfAttentionHead);

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

struct MlpOptions {
  int dim = 0;
  int hidden_factor = 2;
  double dropout = 0.0;
  std::string norm_type = "LayerNorm";
};

// x -> x + layers(x) with layers = [norm, Linear(d, f*d), GELU, Dropout,
// Linear(f*d, d)]: parameters layers.0.*, layers.1.*, layers.4.*.
class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const MlpOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Sequential layers{nullptr};
};
TORCH_MODULE(Mlp);

// pe[p, 2i] = sin(p * exp(-2i ln(10000) / dim)), pe[p, 2i+1] = cos(same).
torch::Tensor harmonic_encoding(int64_t length, int64_t dim, const torch::TensorOptions& options);

// Pre-norm without affine parameters (LayerNorm eps 1e-5, or RMS).
torch::Tensor plain_norm(const torch::Tensor& x, const std::string& norm_type);

}  // namespace wg
