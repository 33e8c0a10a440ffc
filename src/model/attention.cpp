// Attention layers (see header); their cores are in attention_core.cpp.
#include "wg/model/attention.h"

#include "wg/model/dropout.h"
#include "wg/model/lean_ops.h"

#include <functional>
#include <memory>
#include <utility>

namespace wg {

namespace {
// The layer's last product, on the core's output: the core is its prelude
// (lean_ops.h), so with Saving::Lean the product keeps only the core's
// input (q, k and v where the projections left them, and cross-attention's
// kv) and runs the core again in backward, instead of keeping the core's
// output. Not computed in a recomputation's second run, where only a
// residual sum reads it (output_linear).
torch::Tensor output_projection(const torch::nn::Linear& proj, const torch::Tensor& x, const Prelude& core,
                                Saving saving) {
  return output_linear(x, core, {proj->weight}, proj->bias.defined() ? std::vector<torch::Tensor>{proj->bias}
                                                                     : std::vector<torch::Tensor>{}, saving);
}

// The core as a prelude: fn from the projections' output to the core's
// output [..., H·dh]; kv, cross-attention's keys and values, is a tensor
// it reads that needs a gradient. No rerun of its own: a lean backward runs
// fn again under autograd (the kernel's forward, then its backward).
Prelude core_prelude(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& kv,
                     bool draws_random) {
  Prelude core;
  core.fn = std::move(fn);
  if (kv.defined() && kv.requires_grad()) core.params = {kv};
  core.draws_random = draws_random;
  return core;
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
  const int64_t H = o_.num_heads, block = o_.block;
  const double dropout = is_training() ? o_.dropout : 0.0;
  const QkNorm norm = qk_norm(saving);
  const Prelude core = core_prelude(
      [H, block, dropout, norm](const torch::Tensor& qkv) {
        const Projections p = Projections::self(qkv, H);
        if (block == 0) return dense_attention(p, dropout, dropout > 0, norm).flatten(-2, -1);
        const torch::Tensor o = block_local_attention(p, block, norm).flatten(-2, -1);
        return dropout > 0 ? wg::dropout(o, dropout, true) : o;  // block-local: dropout after the core
      },
      {}, dropout > 0);
  const torch::Tensor out = output_projection(proj_out, qkv(x, aux, saving).q, core, saving);
  return o_.with_residual ? out + x : out;
}

torch::Tensor SelfAttentionImpl::forward_varlen(const torch::Tensor& x, const VarlenSegments& seg,
                                                const torch::Tensor& aux, Saving saving) {
  const int64_t H = o_.num_heads;
  const double dropout = is_training() ? o_.dropout : 0.0;
  const QkNorm norm = qk_norm(saving);
  const auto segments = std::make_shared<const VarlenSegments>(seg);  // the core may run again in backward
  const Prelude core = core_prelude(
      [H, segments, dropout, norm](const torch::Tensor& qkv) {
        return varlen_attention(Projections::self(qkv, H), *segments, dropout, dropout > 0, norm).flatten(-2, -1);
      },
      {}, dropout > 0);
  const torch::Tensor out = output_projection(proj_out, qkv(x, aux, saving).q, core, saving);
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
  const double dropout = is_training() ? o_.dropout : 0.0;
  const auto segments = std::make_shared<const VarlenSegments>(seg);  // the core may run again in backward
  const auto attend = [H, segments, dropout, qk_norm](const torch::Tensor& q, const torch::Tensor& keys_values) {
    return varlen_attention(Projections::cross(q, keys_values, H), *segments, dropout, dropout > 0, qk_norm)
        .flatten(-2, -1);
  };
  torch::Tensor out;
  if (o_.sliced_q) {  // x_q [R, slices, d]: every slot attends with its own projection (rows normed one by one)
    std::vector<torch::Tensor> slots;  // each slot's queries [R, H·dh]
    for (int64_t i = 0; i < o_.num_slices_q; ++i)
      slots.push_back(fused_linear(x_q.select(1, i), pre_q, {q_slices_[size_t(i)]->weight}, {}, saving));
    const Prelude core = core_prelude(
        [attend, kv](const torch::Tensor& q) {  // q [R, slices, H·dh] -> [R, slices, H·dh]
          std::vector<torch::Tensor> o;
          for (int64_t i = 0; i < q.size(1); ++i) o.push_back(attend(q.select(1, i), kv));
          return torch::stack(o, 1);
        },
        kv, dropout > 0);
    out = output_projection(proj_out, torch::stack(slots, 1), core, saving);  // [R, slices, d]
  } else {
    const Prelude core = core_prelude([attend, kv](const torch::Tensor& q) { return attend(q, kv); }, kv, dropout > 0);
    out = output_projection(proj_out, fused_linear(x_q, pre_q, {proj_heads_q->weight}, {}, saving), core, saving);
  }
  return o_.with_residual ? x_q + out : out;
}

}  // namespace wg
