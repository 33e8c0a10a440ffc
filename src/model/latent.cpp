// Latent engine and prediction heads (see header).
#include "wg/model/latent.h"

namespace wg {

LatentEngineImpl::LatentEngineImpl(const LatentOptions& o) {
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < o.num_blocks; ++i) {
    attention_.emplace_back(AttentionOptions{o.dim, o.num_heads, o.dropout_rate, o.norm_type, o.bf16_attention_on_cuda});
    mlp_.emplace_back(MlpOptions{o.dim, o.mlp_hidden_factor, o.dropout_rate, o.norm_type});
    layers->push_back(attention_.back());
    layers->push_back(mlp_.back());
  }
  ln_out = register_module("ln_out", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dim}).eps(1e-5)));
  for (size_t i = 0; i < attention_.size(); ++i) {
    auto attn = attention_[i];
    auto mlp = mlp_[i];
    pieces_.push_back({PieceKey::in_block("latent", "", int(i), PieceKind::Attention),
                       [attn](const torch::Tensor& x) mutable { return attn->forward(x); }, attn->parameters()});
    pieces_.push_back({PieceKey::in_block("latent", "", int(i), PieceKind::Mlp),
                       [mlp](const torch::Tensor& x) mutable { return mlp->forward(x); }, mlp->parameters()});
  }
}

torch::Tensor LatentEngineImpl::forward(const torch::Tensor& tokens) {
  return ln_out(run_pieces(pieces_, tokens, observer_));
}

PredHeadImpl::PredHeadImpl(int dim_in, int hidden, int dim_out) {
  layers = register_module("layers", torch::nn::Sequential(
                                         torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim_in}).eps(1e-5)),
                                         torch::nn::Linear(dim_in, hidden), torch::nn::GELU(),
                                         torch::nn::Linear(hidden, dim_out)));
  // Every stream's head is the one piece "pred/head" of the plan: costs add up.
  pieces_ = {{PieceKey::io("pred", "", PieceKind::Head), [this](const torch::Tensor& x) { return layers->forward(x); },
              layers->parameters()}};
}

torch::Tensor PredHeadImpl::forward(const torch::Tensor& x) { return run_pieces(pieces_, x, observer_); }

}  // namespace wg
