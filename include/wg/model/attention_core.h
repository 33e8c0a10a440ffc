// The attention cores (softmax(q kᵀ / sqrt(dh)) v, per head): over
// variable-length segments of packed rows (cells), dense, and block-local.
//
// On CPU they run this project's kernel (attention_kernel.cpp): each
// independent problem (segments of one shape; a chunk of dense sequences)
// is computed on its own, in parallel over problems, with no padding, its
// products reading and writing the packed rows in place (BLAS), and only
// the per-row log-sum-exp is kept for backward, which recomputes the
// probabilities problem by problem (as flash attention does); dropout masks
// are made from a seed taken from the CPU generator, and made again in
// backward (dropout.h). Elsewhere (CUDA; a process without BLAS) the padded
// reference runs, through LibTorch's scaled_dot_product_attention where
// the build has it (flash or memory-efficient kernels), else plain products.
#pragma once

#include <torch/torch.h>

#include <array>
#include <vector>

namespace wg {

// How packed query and key rows fall into segments: segment s holds query
// rows q_offsets[s] .. q_offsets[s+1] and key rows k_offsets[s] ..
// k_offsets[s+1]. The padded layout (q_pos, k_pos, key_mask) is made only
// for a device the reference runs on.
struct VarlenSegments {
  int64_t num_segments = 0;
  int64_t max_q = 0, max_k = 0;
  std::vector<int64_t> q_offsets, k_offsets;  // [S + 1]
  torch::Tensor q_pos;     // [Rq] int64: padded position (s * max_q + j) of each packed query row
  torch::Tensor k_pos;     // [Rk] int64: the same for keys
  torch::Tensor key_mask;  // [S, 1, 1, max_k] bool: true for padding keys of segments that have keys
  // lens_q[s], lens_k[s]: rows of segment s (equal lists for self-attention).
  static VarlenSegments from_lengths(const std::vector<int64_t>& lens_q, const std::vector<int64_t>& lens_k,
                                     const torch::Device& device);
  bool padded() const { return q_pos.defined(); }
};

// The per-head layer norm of q and k (no affine parameters) taken inside
// the core: eps 0 for none. On the CPU the kernel norms them itself
// (head_norm.h) tile by tile, and again in backward: it keeps q and k
// only as given. Off the CPU LibTorch's layer norm runs before the
// reference.
struct QkNorm {
  double eps = 0;
};

// softmax(q kᵀ · scale) v per segment, with probability dropout. A segment
// with no keys gives 0. q [Rq, H, dh], k and v [Rk, H, dh] -> [Rq, H, dh].
torch::Tensor varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const VarlenSegments& seg, double dropout, bool training, const QkNorm& norm = {});

// Dense: q, k, v [B, L, H, dh] -> [B, L, H, dh].
torch::Tensor dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout,
                              bool training, const QkNorm& norm = {});

// Block-local: position t attends to u iff t / block == u / block. No dropout.
torch::Tensor block_local_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    int64_t block, const QkNorm& norm = {});

// q, k and v where the fused projections leave them (attention.h):
// self-attention's qkv [..., 3·H·dh] holds them side by side; cross-
// attention's q [..., H·dh] holds q and kv [..., 2·H·dh] k and v side by
// side. The cores below read them there and give each projection's
// gradient as one tensor, q's, k's and v's columns written in place (no
// split whose backward concatenates, no copies for the q/k norm).
//
// Cross-attention's keys and values may be rows of kv picked by kv_rows
// (1-d int64, on kv's device; rows may repeat): the segments' key rows are
// then kv.index_select(0, kv_rows), and kv's gradient sums each row's
// gradients as index_select's backward does (the decoder's 9 cells' keys,
// projected once per latent token). Under autograd the cores gather them
// once; a joint pass gathers them a range of segments at a time (see
// varlen_attention_joint).
struct Projections {
  torch::Tensor q, kv;  // kv undefined: q is self-attention's qkv
  int64_t heads = 1;
  torch::Tensor kv_rows;  // cross only: the segments' rows of kv (undefined: kv's rows in order)
  static Projections self(const torch::Tensor& qkv, int64_t heads) { return {qkv, {}, heads, {}}; }
  static Projections cross(const torch::Tensor& q, const torch::Tensor& kv, int64_t heads,
                           const torch::Tensor& kv_rows = {}) {
    return {q, kv, heads, kv_rows};
  }
  bool is_self() const { return !kv.defined(); }
  int64_t dim_head() const;
  torch::Tensor segment_kv() const;            // cross: the segments' keys and values (kv, or its rows kv_rows)
  std::array<torch::Tensor, 3> split() const;  // q, k, v [..., H, dh] (for the reference; views unless gathered)
};
// Varlen: -> [Rq, H, dh].
torch::Tensor varlen_attention(const Projections& p, const VarlenSegments& seg, double dropout, bool training,
                               const QkNorm& norm = {});
// Dense and block-local self-attention: qkv [B, L, 3·H·dh] -> [B, L, H, dh].
torch::Tensor dense_attention(const Projections& p, double dropout, bool training, const QkNorm& norm = {});
torch::Tensor block_local_attention(const Projections& p, int64_t block, const QkNorm& norm = {});

// A core run again in a lean backward or in a recomputation's backward
// (lean_ops.h's joint prelude), its backward in the same pass over the
// tiles: the output as the forward gave it (the same bits), and the
// projections' gradients for d_out (the output's shape): self-attention's
// qkv's in d_q, cross-attention's q's and kv's. The scores are computed once instead of twice; the gradients
// are the autograd backward's, bit for bit. The CPU kernel only
// (attention_kernel_runs_on); dropout as training drew it (its seed drawn
// from the CPU generator as the forward drew it: restore the generator
// first). d_kv is
// kv's gradient; with kv_rows, the pass holds the gathered keys and
// values, and their gradient, of one range of segments at a time (about
// 2 MiB of them, the ranges the forward's problems were cut at), and sums
// them into kv's rows range after range: the sums autograd's backward
// of the gather makes, in its order.
struct CoreJoint {
  torch::Tensor out, d_q, d_kv;
};
bool attention_kernel_runs_on(const torch::Tensor& t);
CoreJoint varlen_attention_joint(const Projections& p, const VarlenSegments& seg, double dropout, const QkNorm& norm,
                                 const torch::Tensor& d_out);
CoreJoint dense_attention_joint(const Projections& p, double dropout, const QkNorm& norm, const torch::Tensor& d_out);

// The references: plain LibTorch products on padded segments, autograd's
// backward (the kernel's tests compare against them; CUDA runs them).
torch::Tensor padded_varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const VarlenSegments& seg, double dropout, bool training);
torch::Tensor plain_dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    double dropout, bool training);
torch::Tensor block_local_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    int64_t block);

}  // namespace wg
