// How a module that is not recomputed as a whole keeps what its backward
// needs (the plan's PieceMode::Keep and PieceMode::Lean, passed to the
// modules of a piece by run_pieces).
//   All   every activation autograd would keep;
//   Lean  only the inputs and outputs of the projections: pre-norms,
//         q/k norms, activations (GELU, its dropout) and attention
//         probabilities are recomputed from them in backward, and the
//         attention core's output too where that is cheap
//         (lean_reruns_core); no projection is run again (lean_ops.h;
//         AdaLayerNorm runs its first embedding product again, norms.h).
//         Gradients are bit-identical to All.
//   Rerun a recomputed piece's second run, in backward (PieceMode::Recompute):
//         keeps as All, but its last product (output_linear, lean_ops.h),
//         whose output nothing in the piece's backward reads, is not
//         computed: its gradients need only its input and weights; and
//         an attention core before it that the CPU kernel can run as one
//         joint pass runs only in backward, forward and backward in one
//         pass (its scores computed once). The gradients stay
//         bit-identical to All; only the piece's output (of this run,
//         which backward throws away) is not its value.
#pragma once

namespace wg {

enum class Saving { All, Lean, Rerun };

// Whether a lean attention layer runs its core again in backward instead
// of keeping the core's output (on the CPU kernel in one pass with the
// core's backward, which adds its output product: attention_core.h):
// where that is cheap to recompute and expensive to keep. Cheap: the
// core's FLOPs are at most a quarter of the layer's four projections'
// (for self-attention of width d: at most d/2 keys a query); where keys
// are many, the core costs as much as the projections. Expensive: what a
// rerun frees has at least 2^18 elements (1 MiB in float32): its output,
// and the decoder's keys and values gathered from the latent's
// (attention.cpp); below that a rerun costs the kernel's fixed overhead
// and frees little (at cpu_small's widths of 32 to 128 it took
// `selective` from 1.05x to 1.11x none's step time for 0.5 MiB less of
// 53). The layers decide per call (attention.cpp), the FLOP count per
// piece (flops.cpp), by this one rule.
constexpr double kLeanCoreMinFreed = double(1 << 18);
inline bool lean_reruns_core(double core_flops, double projection_flops, double freed_elements) {
  return freed_elements >= kLeanCoreMinFreed && core_flops <= 0.25 * projection_flops;
}

// What a rerun of a cross-attention core frees (elements): its output
// (query_rows · inner), and where the keys and values are gathered rows
// of their projections (the decoder's kv_rows: gathered_rows of them from
// source_rows), the gathered rows less the source's, which a rerun keeps
// instead (2·inner wide). gathered_rows 0: nothing gathered.
inline double cross_core_frees(double query_rows, double gathered_rows, double source_rows, double inner) {
  return query_rows * inner + (gathered_rows > 0 ? (gathered_rows - source_rows) * 2.0 * inner : 0.0);
}

}  // namespace wg
