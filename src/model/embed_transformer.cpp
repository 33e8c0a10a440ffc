// StreamEmbedTransformer (see header). The plan only flips
// Piece::recompute; forward is one loop over the pieces.
#include "wg/model/embed_transformer.h"

#include <string>

#include "wg/data/tokenizer.h"
#include "wg/model/dropout.h"
#include "wg/util/autocast.h"

namespace wg {

namespace {
std::vector<torch::Tensor> m_params(const torch::nn::AnyModule& m) { return m.ptr()->parameters(); }

// The read-out norms' eps (upstream's): per channel (block), over all channels (full).
constexpr double kBlockNormEps = 1e-6, kFullNormEps = 1e-3;

// The read-out norm: affine LayerNorm, or RMSNorm when norm_type says so.
torch::nn::AnyModule readout_norm(const std::string& norm_type, int64_t dim, double eps) {
  if (norm_type == "RMSNorm") return torch::nn::AnyModule(RMSNorm(int(dim), eps));
  return torch::nn::AnyModule(torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(eps)));
}
}  // namespace

StreamEmbedTransformerImpl::StreamEmbedTransformerImpl(const EmbedOptions& o) : o_(o) {
  TORCH_CHECK(o.unembed_mode == "block" || o.unembed_mode == "full", "embed: unknown unembed_mode '",
              o.unembed_mode, "'");
  const int total = o.num_tokens * o.dim_out;
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < o.num_blocks; ++i) {
    AttentionOptions a;  // the embed's attention: norm eps 1e-5, whatever norm_eps says (as upstream)
    a.dim = o.dim_embed;
    a.num_heads = o.num_heads;
    a.dropout = o.dropout_rate;
    a.norm_eps = 1e-5;
    attention_.emplace_back(a);
    MlpOptions m;
    m.dim_in = o.dim_embed;
    m.dropout = o.dropout_rate;
    mlp_.emplace_back(m);
    layers->push_back(attention_.back());
    layers->push_back(mlp_.back());
  }
  embed = register_module("embed", torch::nn::Linear(o.token_size, o.dim_embed));
  if (o.unembed_mode == "block") {
    const EmbedReadout widths = embed_readout(o);  // throws where the channels' slices would be empty
    e_ = int(widths.centroid_width);
    d_c_ = int(widths.per_channel);
    auto unembed = register_module("unembed", torch::nn::ModuleList());
    auto ln_final = register_module("ln_final", torch::nn::ModuleList());
    for (int c = 0; c < o.num_channels; ++c) {
      unembed_block_.emplace_back(o.dim_embed, d_c_);
      unembed->push_back(unembed_block_.back());
    }
    for (int c = 0; c < o.num_channels; ++c) {
      ln_block_.push_back(readout_norm(o.norm_type, o.dim_embed, kBlockNormEps));
      ln_final->push_back(ln_block_.back().ptr());
    }
  } else {
    e_ = int(embed_readout(o).centroid_width);
    ln_full_ = readout_norm(o.norm_type, int64_t(o.num_channels) * o.dim_embed, kFullNormEps);
    register_module("ln_final", ln_full_.ptr());
    unembed_full_ = register_module("unembed", torch::nn::Linear(o.num_channels * o.dim_embed, total - e_));
  }
  dropout_final = register_module("dropout_final", torch::nn::Dropout(o.dropout_final_rate));
  // Always created, with the adjusted width (dead parameters when
  // embed_size_centroids is 0, kept for state_dict compatibility).
  embed_centroids = register_module("embed_centroids", torch::nn::Linear(kCentroidWidth, e_));
  build_pieces();
}

void StreamEmbedTransformerImpl::build_pieces() {
  const auto key = [this](PieceKind kind, int block = -1) { return PieceKey{"embed", o_.stream, block, kind}; };
  // The input: a product over token_size (a few) inputs and the positional
  // encoding. Its output, [N, C, dim_embed], is as big as a block's input
  // and far cheaper to make again than to keep: lean (selective), and
  // followed by a lean block 0 attention, it says how to make it again
  // from the copy its product keeps for the weight's gradient, and that
  // attention keeps that instead of it (piece.h's MakeAgain).
  const auto input = [this](const torch::Tensor& x) {
    // Contiguous, LibTorch's linear is one product over N · C rows; on the
    // transposed view it ran a batched product with the weight expanded
    // per token (cpu_wide: 6.3-6.6 -> 3.4-3.6 ms a step's forward; the
    // copy, kept for the weight's gradient, is 0.45 MiB there).
    const torch::Tensor xt = x.transpose(-2, -1).contiguous();
    const torch::Tensor h = embed(xt);  // [N, C, dim_embed]
    const torch::Tensor pe = harmonic_encoding(h.size(1), h.size(2), h.options());
    if (autocast_enabled()) return MadeOutput{h + pe, {}};  // its product in a lower precision: kept
    return MadeOutput{h + pe, [xt, pe, w = embed->weight, b = embed->bias] { return torch::linear(xt, w, b) + pe; }};
  };
  pieces_.push_back({key(PieceKind::Input), [input](const torch::Tensor& x, Saving) { return input(x).out; },
                     embed->parameters(), PieceMode::Keep, input});
  for (size_t i = 0; i < attention_.size(); ++i) {
    auto attn = attention_[i];
    auto mlp = mlp_[i];
    pieces_.push_back({key(PieceKind::Attention, int(i)),
                       [attn](const torch::Tensor& x, Saving saving) mutable { return attn->forward(x, {}, saving); },
                       attn->parameters()});
    if (i == 0)  // keeps how to make the input's output again, where both are lean
      pieces_.back().lean_from_remade = [attn](const torch::Tensor& x, const MakeAgain& again) mutable {
        return attn->forward(x, {}, Saving::Lean, again);
      };
    pieces_.push_back({key(PieceKind::Mlp, int(i)), [mlp](const torch::Tensor& x, Saving saving) mutable { return mlp->forward(x, {}, saving); },
                       mlp->parameters()});
  }
  std::vector<torch::Tensor> readout_params;
  for (auto& m : unembed_block_) for (auto& p : m->parameters()) readout_params.push_back(p);
  for (auto& m : ln_block_) for (auto& p : m.ptr()->parameters()) readout_params.push_back(p);
  if (!ln_full_.is_empty()) for (auto& p : ln_full_.ptr()->parameters()) readout_params.push_back(p);
  if (unembed_full_) for (auto& p : unembed_full_->parameters()) readout_params.push_back(p);
  pieces_.push_back({key(PieceKind::Readout), [this](const torch::Tensor& x, Saving saving) { return readout(x, saving); },
                     readout_params});
}

torch::Tensor StreamEmbedTransformerImpl::readout(const torch::Tensor& x, Saving saving) {
  const auto param = [](const torch::nn::AnyModule& m, const char* name) {
    const auto named = m.ptr()->named_parameters(false);
    return named.contains(name) ? named[name] : torch::Tensor();
  };
  const bool rms = o_.norm_type == "RMSNorm";
  if (o_.unembed_mode == "full") {
    Prelude norm;
    if (rms) {
      norm.fn = [m = ln_full_](const torch::Tensor& t) mutable { return m.forward(t); };
      norm.params = m_params(ln_full_);
    } else {
      norm = layer_norm_prelude(kFullNormEps, param(ln_full_, "weight"), param(ln_full_, "bias"));
    }
    return fused_linear(x.flatten(-2, -1), norm, {unembed_full_->weight}, {unembed_full_->bias}, saving);
  }
  // Block: channel c's norm and product on x[:, c], all channels at once.
  std::vector<torch::Tensor> norm_w, norm_b, w, b;
  for (size_t c = 0; c < unembed_block_.size(); ++c) {
    norm_w.push_back(param(ln_block_[c], "weight"));
    if (!rms) norm_b.push_back(param(ln_block_[c], "bias"));
    w.push_back(unembed_block_[c]->weight);
    b.push_back(unembed_block_[c]->bias);
  }
  Prelude norm;
  if (rms) {  // x · rsqrt(mean(x²) + eps) · weight_c, under autograd (no rerun)
    const torch::Tensor weight = torch::stack(norm_w);
    norm.fn = [weight](const torch::Tensor& t) { return t * torch::rsqrt(t.pow(2).mean(-1, true) + kBlockNormEps) * weight; };
    norm.params = {weight};
  } else {
    norm = channel_norm_prelude(kBlockNormEps, torch::stack(norm_w), torch::stack(norm_b));
  }
  return grouped_linear(x, norm, w, b, saving).flatten(-2, -1);  // [N, C·d_c]
}

torch::Tensor StreamEmbedTransformerImpl::forward(const torch::Tensor& x_in, const torch::Tensor& centroids) {
  torch::Tensor out = run_pieces(pieces_, x_in, observer_);  // [N, total - e]
  const int64_t total = int64_t(o_.num_tokens) * o_.dim_out;
  if (o_.embed_size_centroids > 0) {
    TORCH_CHECK(centroids.defined(), "embed: embed_size_centroids > 0 needs centroids");
    out = torch::cat({out, embed_centroids(centroids)}, -1);
  }
  if (out.size(-1) < total) out = torch::constant_pad_nd(out, {0, total - out.size(-1)});
  return wg::dropout(out.reshape({-1, o_.num_tokens, o_.dim_out}), o_.dropout_final_rate, is_training());
}

}  // namespace wg
