// The attention variants of WeatherGenerator's model (wg-model.md §5), in
// float32 as its §5.5 reference: pre-norm (plain LayerNorm, or AdaLayerNorm
// with dim_aux), bias-free projections, per-head LayerNorm on q and k, no
// positional term, softmax scale 1/sqrt(d_head) applied after the matmul,
// dropout on the probabilities (except the block-local variant, which drops
// out the concatenated heads before proj_out), residual.
//
// Parameter names: [lnorm.* | lnorm_in_q.*], proj_heads_q[.i], proj_heads_k,
// proj_heads_v, proj_out (norms without affine parameters have none).
//
// Variable length: rows are packed ([R, d]) and cut into segments by a
// length vector (VarlenSegments); row r of segment s attends exactly to the
// key rows of segment s. A segment with no keys gives 0, not NaN. The
// cores themselves are in attention_core.h.
//
// q, k and v (k and v in cross-attention) come from one product over the
// concatenated projection weights (lean_ops.h), which stay separate
// parameters. With Saving::Lean the layer keeps its input and the
// projections' output; the pre-norm and the q/k norms are run again in
// backward, and so is the core (the kernel's forward, for the output
// projection's input) where that is cheap (lean_reruns_core, saving.h);
// elsewhere the core's output is kept.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "wg/model/attention_core.h"
#include "wg/model/lean_ops.h"
#include "wg/model/norms.h"
#include "wg/model/saving.h"

namespace wg {

struct AttentionOptions {
  int64_t dim = 0;           // dim_embed (queries)
  int64_t dim_kv = 0;        // cross-attention: the keys' width (0: dim)
  int64_t num_heads = 1;
  int64_t dim_head = 0;      // dim_head_proj (0: dim / num_heads)
  bool sliced_q = false;     // cross: SlicedQ (the adapter), proj_heads_q.{slot}
  int64_t num_slices_q = 1;  // SlicedQ: query slots, each with its own projection
  double dropout = 0.0;
  double norm_eps = 1e-5;
  bool qk_norm = true;
  bool with_residual = true;
  int64_t dim_aux = 0;       // > 0: AdaLayerNorm pre-norm on the queries
  int64_t block = 0;         // > 0: block-local self-attention with this block size
};

// Self-attention: dense over the second-to-last axis of [..., L, d]
// (MultiSelfAttentionHead), block-local (MultiSelfAttentionHeadLocal) or
// over segments of packed rows (MultiSelfAttentionHeadVarlen).
class SelfAttentionImpl : public torch::nn::Module {
 public:
  explicit SelfAttentionImpl(const AttentionOptions& options);
  // x [B, L, d] (dense, local) -> same shape. With Saving::Lean and
  // x_again (how to make x again with its bits, piece.h's MakeAgain) the
  // layer does not keep x but makes it again in backward.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& aux = {}, Saving saving = Saving::All,
                        const std::function<torch::Tensor()>& x_again = {});
  // x [R, d] packed rows in segments -> [R, d].
  torch::Tensor forward_varlen(const torch::Tensor& x, const VarlenSegments& seg, const torch::Tensor& aux = {},
                               Saving saving = Saving::All);
  // q's, k's and v's weights one after another in one storage, so that
  // their product reads them in place (place_adjacent, lean_ops.h): done
  // at construction, and again by WeatherModel after a device or dtype
  // change (which gives each parameter its own storage).
  void place_fused();

 private:
  Prelude pre_norm(const torch::Tensor& aux, Saving saving);
  // q, k, v side by side [..., 3·H·dh] (before the q/k norm) from x [..., d].
  Projections qkv(const torch::Tensor& x, const torch::Tensor& aux, Saving saving,
                  const std::function<torch::Tensor()>& x_again = {});
  QkNorm qk_norm() const;
  AttentionOptions o_;
  AdaLayerNorm lnorm_{nullptr};
  torch::nn::Linear proj_heads_q{nullptr}, proj_heads_k{nullptr}, proj_heads_v{nullptr}, proj_out{nullptr};
};
TORCH_MODULE(SelfAttention);

// Cross-attention of packed query rows to packed key rows, segment by
// segment (MultiCrossAttentionHeadVarlen), or, sliced_q, with
// num_slices_q query slots per row sharing keys, values and proj_out
// (MultiCrossAttentionHeadVarlenSlicedQ: proj_heads_q.{slot}).
class CrossAttentionImpl : public torch::nn::Module {
 public:
  explicit CrossAttentionImpl(const AttentionOptions& options);
  // x_q [R, d] (or [R, slices, d] when sliced), x_kv [Rk, dim_kv] -> x_q's shape.
  // kv_rows (int64 [K], optional): the segments' key rows are rows kv_rows
  // of x_kv's keys and values (the decoder's neighbourhoods: each latent
  // token read by 9 cells), gathered after the norm and the product, so
  // each row of x_kv is normed and projected once (the values of gathering
  // x_kv first, up to float rounding). A lean layer that runs its core
  // again gathers again in backward instead of keeping the gathered rows.
  // Not with sliced queries.
  torch::Tensor forward(const torch::Tensor& x_q, const torch::Tensor& x_kv, const VarlenSegments& seg,
                        const torch::Tensor& aux = {}, Saving saving = Saving::All, const torch::Tensor& kv_rows = {});
  // k's and v's weights one after another (see SelfAttention's).
  void place_fused();

 private:
  AttentionOptions o_;
  AdaLayerNorm lnorm_in_q_ada_{nullptr};
  std::vector<torch::nn::Linear> q_slices_;
  torch::nn::Linear proj_heads_q{nullptr}, proj_heads_k{nullptr}, proj_heads_v{nullptr}, proj_out{nullptr};
};
TORCH_MODULE(CrossAttention);

}  // namespace wg
