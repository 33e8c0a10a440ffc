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
  set_plan(LatentPlan{});
}

void LatentEngineImpl::set_plan(const LatentPlan& plan) {
  pieces_.clear();
  for (size_t i = 0; i < attention_.size(); ++i) {
    const BlockPlan b = i < plan.blocks.size() ? plan.blocks[i] : BlockPlan{};
    auto attn = attention_[i];
    auto mlp = mlp_[i];
    const std::string block = "block" + std::to_string(i);
    pieces_.push_back({CheckpointPlan::key("latent", block + ".attn"),
                       [attn](const torch::Tensor& x) mutable { return attn->forward(x); }, attn->parameters(), b.attn});
    pieces_.push_back({CheckpointPlan::key("latent", block + ".mlp"),
                       [mlp](const torch::Tensor& x) mutable { return mlp->forward(x); }, mlp->parameters(), b.mlp});
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
  set_plan(PredPlan{});
}

void PredHeadImpl::set_plan(const PredPlan& plan) {
  // Every stream's head is one piece of the plan ("pred/head"): costs add up.
  pieces_ = {{CheckpointPlan::key("pred", "head"), [this](const torch::Tensor& x) { return layers->forward(x); },
              layers->parameters(), plan.head}};
}

torch::Tensor PredHeadImpl::forward(const torch::Tensor& x) { return run_pieces(pieces_, x, observer_); }

}  // namespace wg
