// Attention layers (see header); their cores are in attention_core.cpp.
#include "wg/model/attention.h"


namespace wg {

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

torch::Tensor SelfAttentionImpl::pre_norm(const torch::Tensor& x, const torch::Tensor& aux) {
  return lnorm_ ? lnorm_(x, aux) : plain_layer_norm(x, o_.norm_eps);
}

torch::Tensor SelfAttentionImpl::heads(torch::nn::Linear proj, const torch::Tensor& h, bool norm) {
  std::vector<int64_t> shape(h.sizes().begin(), h.sizes().end() - 1);
  shape.push_back(o_.num_heads);
  shape.push_back(o_.dim_head);
  torch::Tensor t = proj->forward(h).view(shape);
  return norm && o_.qk_norm ? plain_layer_norm(t, o_.norm_eps) : t;
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& aux) {
  const torch::Tensor h = pre_norm(x, aux);
  const torch::Tensor q = heads(proj_heads_q, h, true), k = heads(proj_heads_k, h, true), v = heads(proj_heads_v, h, false);
  torch::Tensor o = o_.block > 0 ? block_local_attention(q, k, v, o_.block)
                                 : dense_attention(q, k, v, o_.dropout, is_training());
  o = o.flatten(-2, -1);
  if (o_.block > 0 && o_.dropout > 0) o = torch::dropout(o, o_.dropout, is_training());
  const torch::Tensor out = proj_out(o);
  return o_.with_residual ? out + x : out;
}

torch::Tensor SelfAttentionImpl::forward_varlen(const torch::Tensor& x, const VarlenSegments& seg,
                                                const torch::Tensor& aux) {
  const torch::Tensor h = pre_norm(x, aux);
  const torch::Tensor q = heads(proj_heads_q, h, true), k = heads(proj_heads_k, h, true), v = heads(proj_heads_v, h, false);
  const torch::Tensor out = proj_out(varlen_attention(q, k, v, seg, o_.dropout, is_training()).flatten(-2, -1));
  return o_.with_residual ? out + x : out;
}

// ---- cross-attention -------------------------------------------------------

CrossAttentionImpl::CrossAttentionImpl(const AttentionOptions& options) : o_(options) {
  if (o_.dim_kv == 0) o_.dim_kv = o_.dim;
  if (o_.dim_head == 0) o_.dim_head = o_.dim / o_.num_heads;
  const int64_t inner = o_.num_heads * o_.dim_head;
  const auto lin = [&](int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); };
  if (o_.dim_aux > 0) lnorm_in_q_ada_ = register_module("lnorm_in_q", AdaLayerNorm(o_.dim, o_.dim_aux, o_.norm_eps));
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
                                          const torch::Tensor& aux) {
  const int64_t H = o_.num_heads, dh = o_.dim_head;
  const torch::Tensor hq = lnorm_in_q_ada_ ? lnorm_in_q_ada_(x_q, aux) : plain_layer_norm(x_q, o_.norm_eps);
  const torch::Tensor hkv = plain_layer_norm(x_kv, o_.norm_eps);
  const auto qk_norm = [&](const torch::Tensor& t) { return o_.qk_norm ? plain_layer_norm(t, o_.norm_eps) : t; };
  const torch::Tensor k = qk_norm(proj_heads_k(hkv).view({-1, H, dh}));
  const torch::Tensor v = proj_heads_v(hkv).view({-1, H, dh});
  torch::Tensor out;
  if (o_.sliced_q) {  // x_q [R, slices, d]: every slot attends with its own projection
    std::vector<torch::Tensor> slots;
    for (int64_t i = 0; i < o_.num_slices_q; ++i) {
      const torch::Tensor q = qk_norm(q_slices_[size_t(i)](hq.select(1, i)).view({-1, H, dh}));
      slots.push_back(varlen_attention(q, k, v, seg, o_.dropout, is_training()).flatten(-2, -1));  // [R, H*dh]
    }
    out = proj_out(torch::stack(slots, 1));  // [R, slices, d]
  } else {
    const torch::Tensor q = qk_norm(proj_heads_q(hq).view({-1, H, dh}));
    out = proj_out(varlen_attention(q, k, v, seg, o_.dropout, is_training()).flatten(-2, -1));
  }
  return o_.with_residual ? x_q + out : out;
}

}  // namespace wg
