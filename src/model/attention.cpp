// Attention layers (see header); their cores are in attention_core.cpp.
#include "wg/model/attention.h"

#include "wg/model/dropout.h"
#include "wg/model/lean_ops.h"

#include <functional>
#include <memory>
#include <utility>

namespace wg {

namespace {
// The core as a prelude of the output projection: fn from the projections'
// output to the core's output [..., H·dh]; kv, cross-attention's keys and
// values, is a tensor it reads that needs a gradient. No rerun of its own:
// a lean backward runs fn again under autograd (the kernel's forward, then
// its backward), unless the layer gives it a joint run (joint_runs).
Prelude core_prelude(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& kv,
                     bool draws_random) {
  Prelude core;
  core.fn = std::move(fn);
  if (kv.defined() && kv.requires_grad()) core.params = {kv};
  core.draws_random = draws_random;
  return core;
}

// The layer's last product, on the core's output. With Saving::Lean, where
// the core is cheap to run again (rerun_core: lean_reruns_core, saving.h),
// the core is the product's prelude (lean_ops.h): the product keeps only
// the core's input (q, k and v where the projections left them, and
// cross-attention's kv) and runs the core again in backward; otherwise
// the core runs under autograd and its output is kept (rerun_core is read
// only with Saving::Lean). Not computed in a recomputation's second run,
// where only a residual sum reads it (output_linear); there a core with a
// joint pass (joint_runs) does not run in forward either, but once in
// backward, forward and backward in one pass.
torch::Tensor project_core(const torch::nn::Linear& proj, const torch::Tensor& core_in, const Prelude& core,
                           bool rerun_core, Saving saving) {
  const std::vector<torch::Tensor> bias =
      proj->bias.defined() ? std::vector<torch::Tensor>{proj->bias} : std::vector<torch::Tensor>{};
  if (saving == Saving::Lean && !rerun_core) return output_linear(core.fn(core_in), {}, {proj->weight}, bias, saving);
  return output_linear(core_in, core, {proj->weight}, bias, saving);
}

// Whether the core runs as one joint pass with its backward
// (attention_core.h): where it runs again in a lean backward (rerun_core),
// and in a recomputation's second run (Saving::Rerun), whose output
// projection is not computed (output_linear), so that nothing reads the
// core's output before its backward; where the CPU kernel takes its
// input (core_in: q, or q, k and v, as the projections gave them; under
// autocast in a lower precision, which the kernel does not take), in the
// layouts it takes (`layout`: not block-local, whose dropout follows the
// core). The FLOP count follows this rule (flops.cpp's joint).
bool joint_runs(bool rerun_core, Saving saving, const torch::Tensor& core_in, bool layout) {
  return (rerun_core || saving == Saving::Rerun) && layout && attention_kernel_runs_on(core_in);
}

// Σ lq·lk over the segments: the core's FLOPs are 4 · this · H·dh.
double query_key_pairs(const VarlenSegments& seg) {
  double pairs = 0;
  for (int64_t s = 0; s < seg.num_segments; ++s)
    pairs += double(seg.q_offsets[size_t(s) + 1] - seg.q_offsets[size_t(s)]) *
             double(seg.k_offsets[size_t(s) + 1] - seg.k_offsets[size_t(s)]);
  return pairs;
}

// seg with each query row made `slots` rows one after another (the
// adapter's query slots, flattened from [R, slots]): segment s's queries
// are rows q_offsets[s]·slots to q_offsets[s + 1]·slots.
VarlenSegments with_query_slots(const VarlenSegments& seg, int64_t slots, const torch::Device& device) {
  std::vector<int64_t> lens_q, lens_k;
  for (int64_t s = 0; s < seg.num_segments; ++s) {
    lens_q.push_back(slots * (seg.q_offsets[size_t(s) + 1] - seg.q_offsets[size_t(s)]));
    lens_k.push_back(seg.k_offsets[size_t(s) + 1] - seg.k_offsets[size_t(s)]);
  }
  return VarlenSegments::from_lengths(lens_q, lens_k, device);
}

// Whether a lean self-attention of width d (= H·dh) over `pairs` query-key
// pairs on `rows` rows runs its core again: the core 4·pairs·d FLOPs, the
// four projections 8·rows·d².
bool self_core_reruns(double pairs, double rows, int64_t d) {
  return lean_reruns_core(4.0 * pairs * double(d), 8.0 * rows * double(d) * double(d));
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
  place_fused();
}

void SelfAttentionImpl::place_fused() {
  place_adjacent({proj_heads_q->weight, proj_heads_k->weight, proj_heads_v->weight});
}

Prelude SelfAttentionImpl::pre_norm(const torch::Tensor& aux, Saving saving) {
  return lnorm_ ? lnorm_->prelude(aux, saving) : layer_norm_prelude(o_.norm_eps);
}

Projections SelfAttentionImpl::qkv(const torch::Tensor& x, const torch::Tensor& aux, Saving saving,
                                   const std::function<torch::Tensor()>& x_again) {
  // q, k and v side by side: the core reads them there and gives their
  // gradients as one tensor (no split whose backward concatenates).
  Prelude pre = pre_norm(aux, saving);
  if (saving == Saving::Lean) pre.input_again = x_again;
  return Projections::self(
      fused_linear(x, pre, {proj_heads_q->weight, proj_heads_k->weight, proj_heads_v->weight}, {}, saving),
      o_.num_heads);  // [..., 3·H·dh]
}

QkNorm SelfAttentionImpl::qk_norm() const { return QkNorm{o_.qk_norm ? o_.norm_eps : 0.0}; }

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& aux, Saving saving,
                                         const std::function<torch::Tensor()>& x_again) {
  const int64_t H = o_.num_heads, block = o_.block;
  const double dropout = is_training() ? o_.dropout : 0.0;
  // x [B, L, d]: B·L rows, each query sees L keys, or its block's.
  const int64_t L = x.size(-2), rows = x.numel() / x.size(-1);
  const double pairs = block > 0 && block < L ? double(rows / L) * (double(L / block) * double(block * block) +
                                                                     double((L % block) * (L % block)))
                                              : double(rows) * double(L);
  const bool rerun_core = saving == Saving::Lean && self_core_reruns(pairs, double(rows), o_.dim);
  const QkNorm norm = qk_norm();
  Prelude core = core_prelude(
      [H, block, dropout, norm](const torch::Tensor& qkv) {
        const Projections p = Projections::self(qkv, H);
        if (block == 0) return dense_attention(p, dropout, dropout > 0, norm).flatten(-2, -1);
        const torch::Tensor o = block_local_attention(p, block, norm).flatten(-2, -1);
        return dropout > 0 ? wg::dropout(o, dropout, true) : o;  // block-local: dropout after the core
      },
      {}, dropout > 0);
  const torch::Tensor core_in = qkv(x, aux, saving, x_again).q;
  if (joint_runs(rerun_core, saving, core_in, block == 0))
    core.joint = [H, dropout, norm](const torch::Tensor& qkv, const torch::Tensor& dh) {
      const CoreJoint r = dense_attention_joint(Projections::self(qkv, H), dropout, norm, dh);
      return Prelude::JointRun{r.out.flatten(-2, -1), {r.d_q}};
    };
  const torch::Tensor out = project_core(proj_out, core_in, core, rerun_core, saving);
  return o_.with_residual ? out + x : out;
}

torch::Tensor SelfAttentionImpl::forward_varlen(const torch::Tensor& x, const VarlenSegments& seg,
                                                const torch::Tensor& aux, Saving saving) {
  const int64_t H = o_.num_heads;
  const double dropout = is_training() ? o_.dropout : 0.0;
  const bool rerun_core =
      saving == Saving::Lean && self_core_reruns(query_key_pairs(seg), double(x.numel() / x.size(-1)), o_.dim);
  const QkNorm norm = qk_norm();
  const auto segments = std::make_shared<const VarlenSegments>(seg);  // the core may run again in backward
  Prelude core = core_prelude(
      [H, segments, dropout, norm](const torch::Tensor& qkv) {
        return varlen_attention(Projections::self(qkv, H), *segments, dropout, dropout > 0, norm).flatten(-2, -1);
      },
      {}, dropout > 0);
  const torch::Tensor core_in = qkv(x, aux, saving).q;
  if (joint_runs(rerun_core, saving, core_in, true))
    core.joint = [H, segments, dropout, norm](const torch::Tensor& qkv, const torch::Tensor& dh) {
      const CoreJoint r = varlen_attention_joint(Projections::self(qkv, H), *segments, dropout, norm, dh);
      return Prelude::JointRun{r.out.flatten(-2, -1), {r.d_q}};
    };
  const torch::Tensor out = project_core(proj_out, core_in, core, rerun_core, saving);
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
  place_fused();
}

void CrossAttentionImpl::place_fused() { place_adjacent({proj_heads_k->weight, proj_heads_v->weight}); }

torch::Tensor CrossAttentionImpl::forward(const torch::Tensor& x_q, const torch::Tensor& x_kv, const VarlenSegments& seg,
                                          const torch::Tensor& aux, Saving saving, const torch::Tensor& kv_rows) {
  // kv_rows itself is checked where the core reads it (attention_core.cpp).
  TORCH_CHECK(!(kv_rows.defined() && o_.sliced_q), "cross-attention: kv_rows with sliced queries is not supported");
  const int64_t H = o_.num_heads;
  const double eps = o_.norm_eps;
  const Prelude pre_kv = layer_norm_prelude(eps);
  const Prelude pre_q = lnorm_in_q_ada_ ? lnorm_in_q_ada_->prelude(aux, saving) : pre_kv;
  // k and v side by side, q on its own: the core reads them there (see SelfAttention's qkv).
  const torch::Tensor kv = fused_linear(x_kv, pre_kv, {proj_heads_k->weight, proj_heads_v->weight}, {}, saving);
  const double dropout = is_training() ? o_.dropout : 0.0;
  // The core 4·pairs·inner FLOPs (every slot's), the projections
  // 2·inner·(Rq·(dim + dim) + 2·Rk·dim_kv): lean_reruns_core, saving.h.
  const int64_t inner = H * o_.dim_head, slots = o_.sliced_q ? o_.num_slices_q : 1;
  const double rows_q = double(x_q.numel() / x_q.size(-1)), rows_k = double(x_kv.numel() / x_kv.size(-1));
  const bool rerun_core =
      saving == Saving::Lean &&
      lean_reruns_core(4.0 * double(slots) * query_key_pairs(seg) * double(inner),
                       2.0 * double(inner) * (rows_q * double(2 * o_.dim) + 2.0 * rows_k * double(o_.dim_kv)));
  const QkNorm qk_norm{o_.qk_norm ? eps : 0.0};
  // The queries' projections [rows, H·dh]. Sliced (x_q [R, slots, d]):
  // every slot with its own projection (rows normed one by one), the slots
  // of a row one after another, so that a segment's queries are its rows'
  // slots and one core call attends them all (with its joint pass where
  // the core runs again).
  torch::Tensor q;
  if (o_.sliced_q) {
    std::vector<torch::Tensor> queries;  // each slot's [R, H·dh]
    for (int64_t i = 0; i < o_.num_slices_q; ++i)
      queries.push_back(fused_linear(x_q.select(1, i), pre_q, {q_slices_[size_t(i)]->weight}, {}, saving));
    q = slots == 1 ? queries.front() : torch::stack(queries, 1).flatten(0, 1);
  } else {
    q = fused_linear(x_q, pre_q, {proj_heads_q->weight}, {}, saving);
  }
  const auto segments =  // the core may run again in backward
      std::make_shared<const VarlenSegments>(slots > 1 ? with_query_slots(seg, slots, x_q.device()) : seg);
  // The segments' keys and values are kv's rows, or its rows kv_rows (attention_core.h).
  Prelude core = core_prelude(
      [H, segments, dropout, qk_norm, kv, kv_rows](const torch::Tensor& q) {
        return varlen_attention(Projections::cross(q, kv, H, kv_rows), *segments, dropout, dropout > 0, qk_norm)
            .flatten(-2, -1);
      },
      kv, dropout > 0);
  if (joint_runs(rerun_core, saving, q, true))
    core.joint = [H, segments, dropout, qk_norm, kv, kv_rows](const torch::Tensor& q, const torch::Tensor& dh) {
      const CoreJoint r =
          varlen_attention_joint(Projections::cross(q, kv, H, kv_rows), *segments, dropout, qk_norm, dh);
      return Prelude::JointRun{r.out.flatten(-2, -1), {r.d_q, r.d_kv}};
    };
  torch::Tensor out = project_core(proj_out, q, core, rerun_core, saving);
  if (o_.sliced_q) out = out.view(x_q.sizes());  // [R·slots, d] -> [R, slots, d]
  return o_.with_residual ? x_q + out : out;
}

}  // namespace wg
