// The attention cores' entry points (see header): shapes checked, then
// the CPU kernel (attention_kernel.h) or, elsewhere, the padded reference
// (attention_reference.cpp).
#include "wg/model/attention_core.h"

#include <algorithm>

#include "attention_kernel.h"
#include "wg/model/norms.h"

namespace wg {

namespace {

// The norm of q and k off the kernel (the reference path).
torch::Tensor normed(const torch::Tensor& t, const QkNorm& norm) {
  return norm.eps > 0 ? plain_layer_norm(t, norm.eps) : t;
}

// The key rows of each range of segments a gathered cross-attention's
// problems are cut at (kernel::kGatherRangeBytes of its gathered keys and values);
// 0 (one range) otherwise.
int64_t gather_range_rows(const Projections& p) {
  if (p.is_self() || !p.kv_rows.defined()) return 0;
  return std::max<int64_t>(1, kernel::kGatherRangeBytes / (p.kv.size(-1) * int64_t(p.kv.element_size())));
}

// p's rows are seg's (q's, and the keys', kv's or kv_rows').
void check_rows(const Projections& p, const VarlenSegments& seg) {
  TORCH_CHECK(!p.kv_rows.defined() || (!p.is_self() && p.kv.dim() == 2 && p.kv_rows.dim() == 1 &&
                                       p.kv_rows.scalar_type() == torch::kInt64 && p.kv_rows.device() == p.kv.device()),
              "attention: kv_rows must be a 1-d int64 tensor of rows of cross-attention's kv [rows, 2·H·dh], on "
              "its device");
  const int64_t keys = p.is_self() ? p.q.size(0) : p.kv_rows.defined() ? p.kv_rows.numel() : p.kv.size(0);
  TORCH_CHECK(p.q.size(0) == seg.q_offsets.back() && keys == seg.k_offsets.back(),
              "varlen attention: rows do not match the segment lengths (", p.q.size(0), " query and ", keys,
              " key rows against ", seg.q_offsets.back(), " and ", seg.k_offsets.back(), ")");
}

// The varlen problems of p's call.
c10::intrusive_ptr<kernel::Problems> problems_of(const Projections& p, const VarlenSegments& seg) {
  return kernel::varlen_problems(seg, p.heads, int64_t(p.q.element_size()), gather_range_rows(p));
}

}  // namespace

int64_t Projections::dim_head() const {
  const int64_t parts = is_self() ? 3 : 1;
  TORCH_CHECK(heads > 0 && q.size(-1) % (parts * heads) == 0, "attention: ", is_self() ? "qkv" : "q", " width ",
              q.size(-1), " is not ", parts == 3 ? "3 x " : "", heads, " heads x a head width");
  TORCH_CHECK(is_self() || kv.size(-1) == 2 * q.size(-1), "attention: kv width ", kv.size(-1), " is not 2 x q's ",
              q.size(-1));
  return q.size(-1) / (parts * heads);
}

torch::Tensor Projections::segment_kv() const {  // kv_rows checked by the cores (check_rows)
  return kv_rows.defined() ? kv.index_select(0, kv_rows) : kv;
}

std::array<torch::Tensor, 3> Projections::split() const {
  const int64_t inner = heads * dim_head();
  const auto as_heads = [&](const torch::Tensor& t) {
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end() - 1);
    shape.insert(shape.end(), {heads, dim_head()});
    return t.view(shape);
  };
  if (is_self()) {
    const std::vector<torch::Tensor> parts = q.split(inner, -1);
    return {as_heads(parts[0]), as_heads(parts[1]), as_heads(parts[2])};
  }
  const std::vector<torch::Tensor> parts = segment_kv().split(inner, -1);
  return {as_heads(q), as_heads(parts[0]), as_heads(parts[1])};
}

torch::Tensor varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const VarlenSegments& seg, double dropout, bool training, const QkNorm& norm) {
  TORCH_CHECK(q.size(0) == seg.q_offsets.back() && k.size(0) == seg.k_offsets.back(),
              "varlen attention: rows do not match the segment lengths");
  if (!kernel::runs_on(q)) return padded_varlen_attention(normed(q, norm), normed(k, norm), v, seg, dropout, training);
  return kernel::attend(q, k, v, kernel::varlen_problems(seg, q.size(1), int64_t(q.element_size())),
                        training ? dropout : 0.0, norm);
}

torch::Tensor varlen_attention(const Projections& p, const VarlenSegments& seg, double dropout, bool training,
                               const QkNorm& norm) {
  check_rows(p, seg);
  if (!kernel::runs_on(p.q)) {
    const auto [q, k, v] = p.split();
    return varlen_attention(q, k, v, seg, dropout, training, norm);
  }
  return kernel::attend(p, problems_of(p, seg), training ? dropout : 0.0, norm);
}

torch::Tensor dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout,
                              bool training, const QkNorm& norm) {
  if (!kernel::runs_on(q) || q.dim() != 4 || k.size(1) != q.size(1))
    return plain_dense_attention(normed(q, norm), normed(k, norm), v, dropout, training);
  const int64_t B = q.size(0), L = q.size(1), H = q.size(2), dh = q.size(3);
  return kernel::attend(q, k, v, kernel::dense_problems(B, L, H, int64_t(q.element_size())), training ? dropout : 0.0,
                        norm)
      .view({B, L, H, dh});
}

torch::Tensor dense_attention(const Projections& p, double dropout, bool training, const QkNorm& norm) {
  TORCH_CHECK(p.is_self() && p.q.dim() == 3, "dense attention: self-attention on [B, L, 3·H·dh] only");
  if (!kernel::runs_on(p.q)) {
    const auto [q, k, v] = p.split();
    return dense_attention(q, k, v, dropout, training, norm);
  }
  const int64_t B = p.q.size(0), L = p.q.size(1), H = p.heads, dh = p.dim_head();
  return kernel::attend(p, kernel::dense_problems(B, L, H, int64_t(p.q.element_size())), training ? dropout : 0.0, norm)
      .view({B, L, H, dh});
}

bool attention_kernel_runs_on(const torch::Tensor& t) { return kernel::runs_on(t); }

CoreJoint varlen_attention_joint(const Projections& p, const VarlenSegments& seg, double dropout, const QkNorm& norm,
                                 const torch::Tensor& d_out) {
  TORCH_CHECK(kernel::runs_on(p.q), "varlen attention: the joint pass runs on the CPU kernel only");
  check_rows(p, seg);
  return kernel::attend_joint(p, problems_of(p, seg), dropout, norm, d_out);
}

CoreJoint dense_attention_joint(const Projections& p, double dropout, const QkNorm& norm, const torch::Tensor& d_out) {
  TORCH_CHECK(kernel::runs_on(p.q) && p.is_self() && p.q.dim() == 3,
              "dense attention: the joint pass runs on the CPU kernel, self-attention on [B, L, 3·H·dh] only");
  const int64_t B = p.q.size(0), L = p.q.size(1), H = p.heads, dh = p.dim_head();
  CoreJoint r =
      kernel::attend_joint(p, kernel::dense_problems(B, L, H, int64_t(p.q.element_size())), dropout, norm, d_out);
  r.out = r.out.view({B, L, H, dh});
  return r;
}

torch::Tensor block_local_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    int64_t block, const QkNorm& norm) {
  const int64_t B = q.size(0), L = q.size(1), H = q.size(2), dh = q.size(3);
  if (!kernel::runs_on(q)) return block_local_reference(normed(q, norm), normed(k, norm), v, block);
  return kernel::attend(q, k, v, kernel::block_problems(B, L, block, H, int64_t(q.element_size())), 0.0, norm)
      .view({B, L, H, dh});
}

torch::Tensor block_local_attention(const Projections& p, int64_t block, const QkNorm& norm) {
  TORCH_CHECK(p.is_self() && p.q.dim() == 3, "block-local attention: self-attention on [B, L, 3·H·dh] only");
  if (!kernel::runs_on(p.q)) {
    const auto [q, k, v] = p.split();
    return block_local_attention(q, k, v, block, norm);
  }
  const int64_t B = p.q.size(0), L = p.q.size(1), H = p.heads, dh = p.dim_head();
  return kernel::attend(p, kernel::block_problems(B, L, block, H, int64_t(p.q.element_size())), 0.0, norm)
      .view({B, L, H, dh});
}

}  // namespace wg
