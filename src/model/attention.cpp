// Attention (see header). Invariants of the varlen core: padded query rows
// are zero and never read back; padded keys are masked to -inf, except in a
// segment with no keys at all, where every (zero) padding key is kept so the
// softmax is uniform over zero values and the output is exactly 0 (no NaN,
// no gradient to anything real).
#include "wg/model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace wg {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

torch::Tensor softmax_attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& key_mask, double dropout, bool training) {
  // q [.., H, Lq, dh], k v [.., H, Lk, dh]
  const double scale = 1.0 / std::sqrt(double(q.size(-1)));
  torch::Tensor s = torch::matmul(q, k.transpose(-2, -1)) * scale;
  if (key_mask.defined()) s = s.masked_fill(key_mask, kNegInf);
  torch::Tensor p = torch::softmax(s, -1);
  if (dropout > 0 && training) p = torch::dropout(p, dropout, true);
  return torch::matmul(p, v);
}
}  // namespace

VarlenSegments VarlenSegments::from_lengths(const std::vector<int64_t>& lens_q, const std::vector<int64_t>& lens_k,
                                            const torch::Device& device) {
  TORCH_CHECK(lens_q.size() == lens_k.size(), "varlen attention: ", lens_q.size(), " query segments but ",
              lens_k.size(), " key segments");
  VarlenSegments s;
  s.num_segments = int64_t(lens_q.size());
  for (size_t i = 0; i < lens_q.size(); ++i) {
    s.max_q = std::max(s.max_q, lens_q[i]);
    s.max_k = std::max(s.max_k, lens_k[i]);
  }
  std::vector<int64_t> q_pos, k_pos;
  std::vector<uint8_t> mask(size_t(s.num_segments * s.max_k), 0);
  for (int64_t seg = 0; seg < s.num_segments; ++seg) {
    for (int64_t j = 0; j < lens_q[size_t(seg)]; ++j) q_pos.push_back(seg * s.max_q + j);
    const int64_t nk = lens_k[size_t(seg)];
    for (int64_t j = 0; j < nk; ++j) k_pos.push_back(seg * s.max_k + j);
    if (nk > 0)
      for (int64_t j = nk; j < s.max_k; ++j) mask[size_t(seg * s.max_k + j)] = 1;
  }
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  s.q_pos = torch::tensor(q_pos, i64).to(device);
  s.k_pos = torch::tensor(k_pos, i64).to(device);
  s.key_mask = torch::from_blob(mask.data(), {s.num_segments, 1, 1, s.max_k}, torch::kUInt8)
                   .to(torch::kBool)
                   .to(device);
  return s;
}

torch::Tensor varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const VarlenSegments& seg, double dropout, bool training) {
  const int64_t H = q.size(1), dh = q.size(2), S = seg.num_segments;
  TORCH_CHECK(q.size(0) == seg.q_pos.size(0) && k.size(0) == seg.k_pos.size(0),
              "varlen attention: rows do not match the segment lengths");
  const auto pad = [&](const torch::Tensor& x, const torch::Tensor& pos, int64_t len) {
    return torch::zeros({S * len, x.size(1), x.size(2)}, x.options())
        .index_copy(0, pos, x)
        .view({S, len, x.size(1), x.size(2)})
        .transpose(1, 2);  // [S, H, len, dh]
  };
  const torch::Tensor out = softmax_attend(pad(q, seg.q_pos, seg.max_q), pad(k, seg.k_pos, seg.max_k),
                                           pad(v, seg.k_pos, seg.max_k), seg.key_mask, dropout, training);
  return out.transpose(1, 2).reshape({S * seg.max_q, H, dh}).index_select(0, seg.q_pos);
}

torch::Tensor dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout,
                              bool training) {
  return softmax_attend(q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2), {}, dropout, training)
      .transpose(-3, -2);
}

torch::Tensor block_local_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    int64_t block) {
  // [B, L, H, dh]: L cut into blocks of `block` (the last one padded and its padding masked).
  const int64_t B = q.size(0), L = q.size(1), H = q.size(2), dh = q.size(3);
  const int64_t nb = (L + block - 1) / block, Lp = nb * block;
  const auto blocks = [&](const torch::Tensor& x) {
    torch::Tensor p = Lp == L ? x : torch::constant_pad_nd(x, {0, 0, 0, 0, 0, Lp - L});
    return p.view({B, nb, block, H, dh}).permute({0, 1, 3, 2, 4});  // [B, nb, H, block, dh]
  };
  torch::Tensor mask;
  if (Lp != L) {
    mask = torch::zeros({nb, 1, 1, block}, torch::TensorOptions().dtype(torch::kBool).device(q.device()));
    mask.index_put_({nb - 1, 0, 0, torch::indexing::Slice(block - (Lp - L), torch::indexing::None)}, true);
  }
  const torch::Tensor out = softmax_attend(blocks(q), blocks(k), blocks(v), mask, 0.0, false);
  return out.permute({0, 1, 3, 2, 4}).reshape({B, Lp, H, dh}).narrow(1, 0, L);
}

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
