// Attention layers (see header); their cores are in attention_core.cpp.
#include "wg/model/attention.h"

#include "wg/model/dropout.h"
#include "wg/model/lean_ops.h"

namespace wg {

namespace {
// The layer's last product: not computed in a recomputation's second run,
// where only a residual sum reads it (output_linear).
torch::Tensor output_projection(const torch::nn::Linear& proj, const torch::Tensor& o, Saving saving) {
  return output_linear(o, {}, {proj->weight}, proj->bias.defined() ? std::vector<torch::Tensor>{proj->bias}
                                                                     : std::vector<torch::Tensor>{}, saving);
}
}  // namespace

// ---- self-attention --------------------------------------------------------

SelfAttentionImpl::SelfAttentionImpl(const AttentionOptions& options) : o_(options) {
  if (o_.dim_head == 0) o_.dim_head = o_.dim / o_.num_heads;
  TORCH_CHECK(o_.num_heads * o_.dim_head == o_.dim, "self-attention: ", o_.num_heads, " heads of ", o_.dim_head,
              " do not make the width ", o_.dim);
  if (o_.dim_aux > 0) lnorm_ = register_module("lnorm", AdaLayerNorm(o_.dim, o_.dim_aux, o_.norm_eps));
  const auto lin = [&](int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); };
  proj_heads_q = register_module("proj_heads_q", lin(o_.dim, o_.num_heads * o_.dim_head));
  proj_heads_k = register_module("proj_heads_k", lin(o_.dim, o_.num_heads * o_.dim_head));
  proj_heads_v = register_module("proj_heads_v", lin(o_.dim, o_.num_heads * o_.dim_head));
  proj_out = register_module("proj_out", lin(o_.dim, o_.dim));
}

Prelude SelfAttentionImpl::pre_norm(const torch::Tensor& aux, Saving saving) {
  return lnorm_ ? lnorm_->prelude(aux, saving) : layer_norm_prelude(o_.norm_eps);
}

Projections SelfAttentionImpl::qkv(const torch::Tensor& x, const torch::Tensor& aux, Saving saving) {
  // q, k and v side by side: the core reads them there and gives their
  // gradients as one tensor (no split whose backward concatenates).
  return Projections::self(fused_linear(x, pre_norm(aux, saving),
                                        {proj_heads_q->weight, proj_heads_k->weight, proj_heads_v->weight}, {}, saving),
                           o_.num_heads);  // [..., 3·H·dh]
}

QkNorm SelfAttentionImpl::qk_norm(Saving saving) const {
  return QkNorm{o_.qk_norm ? o_.norm_eps : 0.0, saving == Saving::Lean};
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& aux, Saving saving) {
  const Projections p = qkv(x, aux, saving);
  torch::Tensor o = o_.block > 0 ? block_local_attention(p, o_.block, qk_norm(saving))
                                 : dense_attention(p, o_.dropout, is_training(), qk_norm(saving));
  o = o.flatten(-2, -1);
  if (o_.block > 0 && o_.dropout > 0) o = wg::dropout(o, o_.dropout, is_training());
  const torch::Tensor out = output_projection(proj_out, o, saving);
  return o_.with_residual ? out + x : out;
}

torch::Tensor SelfAttentionImpl::forward_varlen(const torch::Tensor& x, const VarlenSegments& seg,
                                                const torch::Tensor& aux, Saving saving) {
  const torch::Tensor o = varlen_attention(qkv(x, aux, saving), seg, o_.dropout, is_training(), qk_norm(saving));
  const torch::Tensor out = output_projection(proj_out, o.flatten(-2, -1), saving);
  return o_.with_residual ? out + x : out;
}

// ---- cross-attention -------------------------------------------------------

CrossAttentionImpl::CrossAttentionImpl(const AttentionOptions& options) : o_(options) {
  if (o_.dim_kv == 0) o_.dim_kv = o_.dim;
  if (o_.dim_head == 0) o_.dim_head = o_.dim / o_.num_heads;
  const int64_t inner = o_.num_heads * o_.dim_head;
  const auto lin = [&](int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); };
  if (o_.dim_aux > 0) lnorm_in_q_ada_ = register_module("lnorm_in_q", AdaLayerNorm(o_.dim, o_.dim_aux, o_.norm_eps));
  TORCH_CHECK(!(o_.dim_aux > 0 && o_.sliced_q), "cross-attention: sliced queries with an AdaLayerNorm are not supported");
  if (o_.sliced_q) {  // the adapter's SlicedQ: one query projection per slot
    auto slices = register_module("proj_heads_q", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.num_slices_q; ++i) {
      q_slices_.push_back(lin(o_.dim, inner));
      slices->push_back(q_slices_.back());
    }
  } else {
    proj_heads_q = register_module("proj_heads_q", lin(o_.dim, inner));
  }
  proj_heads_k = register_module("proj_heads_k", lin(o_.dim_kv, inner));
  proj_heads_v = register_module("proj_heads_v", lin(o_.dim_kv, inner));
  proj_out = register_module("proj_out", lin(inner, o_.dim));
}

torch::Tensor CrossAttentionImpl::forward(const torch::Tensor& x_q, const torch::Tensor& x_kv, const VarlenSegments& seg,
                                          const torch::Tensor& aux, Saving saving) {
  const int64_t H = o_.num_heads;
  const double eps = o_.norm_eps;
  const Prelude pre_kv = layer_norm_prelude(eps);
  const Prelude pre_q = lnorm_in_q_ada_ ? lnorm_in_q_ada_->prelude(aux, saving) : pre_kv;
  // k and v side by side, q on its own: the core reads them there (see SelfAttention's qkv).
  const torch::Tensor kv = fused_linear(x_kv, pre_kv, {proj_heads_k->weight, proj_heads_v->weight}, {}, saving);
  const QkNorm qk_norm{o_.qk_norm ? eps : 0.0, saving == Saving::Lean};
  const auto attend = [&](const torch::Tensor& rows, const torch::Tensor& weight) {  // -> [R, H·dh]
    const torch::Tensor q = fused_linear(rows, pre_q, {weight}, {}, saving);
    return varlen_attention(Projections::cross(q, kv, H), seg, o_.dropout, is_training(), qk_norm).flatten(-2, -1);
  };
  torch::Tensor out;
  if (o_.sliced_q) {  // x_q [R, slices, d]: every slot attends with its own projection (rows normed one by one)
    std::vector<torch::Tensor> slots;
    for (int64_t i = 0; i < o_.num_slices_q; ++i) slots.push_back(attend(x_q.select(1, i), q_slices_[size_t(i)]->weight));
    out = output_projection(proj_out, torch::stack(slots, 1), saving);  // [R, slices, d]
  } else {
    out = output_projection(proj_out, attend(x_q, proj_heads_q->weight), saving);
  }
  return o_.with_residual ? x_q + out : out;
}

}  // namespace wg
