// Attention, MLP, norms and positional encoding (see header).
#include "wg/model/layers.h"

#include <cmath>

namespace wg {

torch::Tensor plain_norm(const torch::Tensor& x, const std::string& norm_type) {
  if (norm_type == "RMSNorm") return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + 1e-5);
  return torch::layer_norm(x, {x.size(-1)}, {}, {}, 1e-5);
}

MultiSelfAttentionHeadImpl::MultiSelfAttentionHeadImpl(const AttentionOptions& options)
    : o_(options), dim_head_(options.dim / options.num_heads) {
  TORCH_CHECK(o_.dim % o_.num_heads == 0, "attention: dim ", o_.dim, " not divisible by ", o_.num_heads, " heads");
  auto lin = [&] { return torch::nn::Linear(torch::nn::LinearOptions(o_.dim, o_.dim).bias(false)); };
  proj_heads_q = register_module("proj_heads_q", lin());
  proj_heads_k = register_module("proj_heads_k", lin());
  proj_heads_v = register_module("proj_heads_v", lin());
  proj_out = register_module("proj_out", lin());
}

torch::Tensor MultiSelfAttentionHeadImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), S = x.size(1), H = o_.num_heads, dh = dim_head_;
  const torch::Tensor h = plain_norm(x, o_.norm_type);
  // [B, S, D] -> [B, H, S, dh], q and k normalised per head (qk-norm)
  auto heads = [&](const torch::Tensor& t) { return t.view({B, S, H, dh}).transpose(1, 2); };
  torch::Tensor q = torch::layer_norm(heads(proj_heads_q(h)), {dh}, {}, {}, 1e-5);
  torch::Tensor k = torch::layer_norm(heads(proj_heads_k(h)), {dh}, {}, {}, 1e-5);
  torch::Tensor v = heads(proj_heads_v(h));
  const auto dtype = x.scalar_type();
  if (x.is_cuda() && o_.bf16_on_cuda) {
    q = q.to(torch::kBFloat16);
    k = k.to(torch::kBFloat16);
    v = v.to(torch::kBFloat16);
  }
  torch::Tensor p = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(dh))), -1);
  p = torch::dropout(p, o_.dropout, is_training());
  torch::Tensor out = torch::matmul(p, v).to(dtype).transpose(1, 2).reshape({B, S, H * dh});  // [B, S, D]
  return x + proj_out(out);
}

RMSNormImpl::RMSNormImpl(int dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_) * weight;
}

MlpImpl::MlpImpl(const MlpOptions& o) {
  layers = torch::nn::Sequential();
  if (o.norm_type == "RMSNorm") layers->push_back(RMSNorm(o.dim, 1e-5));
  else layers->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dim}).eps(1e-5)));
  layers->push_back(torch::nn::Linear(o.dim, o.hidden_factor * o.dim));
  layers->push_back(torch::nn::GELU());
  layers->push_back(torch::nn::Dropout(o.dropout));
  layers->push_back(torch::nn::Linear(o.hidden_factor * o.dim, o.dim));
  register_module("layers", layers);
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return x + layers->forward(x); }

torch::Tensor harmonic_encoding(int64_t length, int64_t dim, const torch::TensorOptions& options) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor pos = torch::arange(length, f64).unsqueeze(1);                           // [L, 1]
  torch::Tensor div = torch::exp(torch::arange(0, dim, 2, f64) * (-std::log(10000.0) / dim));  // [ceil(D/2)]
  torch::Tensor pe = torch::zeros({length, dim}, f64);
  using torch::indexing::Slice;
  pe.index_put_({Slice(), Slice(0, torch::indexing::None, 2)}, torch::sin(pos * div));
  pe.index_put_({Slice(), Slice(1, torch::indexing::None, 2)}, torch::cos(pos * div.slice(0, 0, dim / 2)));
  return pe.to(options);
}

}  // namespace wg
