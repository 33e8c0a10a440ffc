// The attention references and the segment layout (see attention_core.h):
// plain LibTorch products on padded segments with autograd's backward (the
// CPU kernel's tests compare against them; CUDA runs them, through
// scaled_dot_product_attention where the build has it).
#include "wg/model/attention_core.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

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

// q, k, v [.., H, L, dh] on a device with scaled_dot_product_attention (LibTorch 2):
// flash or memory-efficient kernels; key_mask true = masked out.
torch::Tensor device_attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& key_mask, double dropout, bool training) {
#if TORCH_VERSION_MAJOR >= 2
  const std::optional<at::Tensor> keep =
      key_mask.defined() ? std::optional<at::Tensor>(key_mask.logical_not()) : std::nullopt;
  return at::scaled_dot_product_attention(q, k, v, keep, training ? dropout : 0.0, false);
#else
  return softmax_attend(q, k, v, key_mask, dropout, training);
#endif
}

// Offsets always; the padded layout on `device` when `padded`.
VarlenSegments make_segments(const std::vector<int64_t>& lens_q, const std::vector<int64_t>& lens_k,
                             const torch::Device& device, bool padded) {
  TORCH_CHECK(lens_q.size() == lens_k.size(), "varlen attention: ", lens_q.size(), " query segments but ",
              lens_k.size(), " key segments");
  VarlenSegments s;
  s.num_segments = int64_t(lens_q.size());
  s.q_offsets.assign(1, 0);
  s.k_offsets.assign(1, 0);
  for (size_t i = 0; i < lens_q.size(); ++i) {
    s.max_q = std::max(s.max_q, lens_q[i]);
    s.max_k = std::max(s.max_k, lens_k[i]);
    s.q_offsets.push_back(s.q_offsets.back() + lens_q[i]);
    s.k_offsets.push_back(s.k_offsets.back() + lens_k[i]);
  }
  if (!padded) return s;
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
}  // namespace

VarlenSegments VarlenSegments::from_lengths(const std::vector<int64_t>& lens_q, const std::vector<int64_t>& lens_k,
                                            const torch::Device& device) {
  return make_segments(lens_q, lens_k, device, !device.is_cpu());  // the CPU kernel needs no padded layout
}

torch::Tensor padded_varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const VarlenSegments& seg_in, double dropout, bool training) {
  VarlenSegments padded_seg;
  if (!seg_in.padded()) {  // made on the CPU for a test: build the padded layout from the offsets
    std::vector<int64_t> lq, lk;
    for (int64_t s = 0; s < seg_in.num_segments; ++s) {
      lq.push_back(seg_in.q_offsets[size_t(s) + 1] - seg_in.q_offsets[size_t(s)]);
      lk.push_back(seg_in.k_offsets[size_t(s) + 1] - seg_in.k_offsets[size_t(s)]);
    }
    padded_seg = make_segments(lq, lk, q.device(), true);
  }
  const VarlenSegments& seg = seg_in.padded() ? seg_in : padded_seg;
  const torch::Tensor q_pos = seg.q_pos.to(q.device()), k_pos = seg.k_pos.to(q.device());
  const torch::Tensor key_mask = seg.key_mask.to(q.device());
  const int64_t H = q.size(1), dh = q.size(2), S = seg.num_segments;
  TORCH_CHECK(q.size(0) == q_pos.size(0) && k.size(0) == k_pos.size(0),
              "varlen attention: rows do not match the segment lengths");
  const auto pad = [&](const torch::Tensor& x, const torch::Tensor& pos, int64_t len) {
    return torch::zeros({S * len, x.size(1), x.size(2)}, x.options())
        .index_copy(0, pos, x)
        .view({S, len, x.size(1), x.size(2)})
        .transpose(1, 2);  // [S, H, len, dh]
  };
  const auto attend = q.device().is_cpu() ? softmax_attend : device_attend;
  const torch::Tensor out = attend(pad(q, q_pos, seg.max_q), pad(k, k_pos, seg.max_k), pad(v, k_pos, seg.max_k),
                                   key_mask, dropout, training);
  return out.transpose(1, 2).reshape({S * seg.max_q, H, dh}).index_select(0, q_pos);
}

torch::Tensor plain_dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    double dropout, bool training) {
  const auto attend = q.device().is_cpu() ? softmax_attend : device_attend;
  return attend(q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2), {}, dropout, training)
      .transpose(-3, -2);
}

torch::Tensor block_local_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    int64_t block) {
  // [B, L, H, dh]: the full blocks as B·nb sequences, the shorter last block on its own.
  const int64_t B = q.size(0), L = q.size(1), H = q.size(2), dh = q.size(3);
  const int64_t full = L / block, rest = L - full * block;
  std::vector<int64_t> sizes;
  if (full > 0) sizes.push_back(full * block);
  if (rest > 0) sizes.push_back(rest);
  const auto cut = [&](const torch::Tensor& x) {
    return sizes.size() == 1 ? std::vector<torch::Tensor>{x} : x.split_with_sizes(sizes, 1);
  };
  const std::vector<torch::Tensor> qs = cut(q), ks = cut(k), vs = cut(v);
  std::vector<torch::Tensor> parts;
  if (full > 0) {
    const auto blocks = [&](const torch::Tensor& x) { return x.reshape({B * full, block, H, dh}); };
    parts.push_back(plain_dense_attention(blocks(qs[0]), blocks(ks[0]), blocks(vs[0]), 0.0, false)
                        .reshape({B, full * block, H, dh}));
  }
  if (rest > 0) parts.push_back(plain_dense_attention(qs.back(), ks.back(), vs.back(), 0.0, false));
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 1);
}

}  // namespace wg
