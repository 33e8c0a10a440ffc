// How a module that is not recomputed as a whole keeps what its backward
// needs (the plan's PieceMode::Keep and PieceMode::Lean, passed to the
// modules of a piece by run_pieces).
//   All   every activation autograd would keep;
//   Lean  only the inputs and outputs of the projections: pre-norms,
//         q/k norms, activations (GELU, its dropout) and attention
//         probabilities are recomputed from them in backward, and the
//         attention core's output too where that is cheap
//         (lean_reruns_core); no projection is run again (lean_ops.h;
//         AdaLayerNorm runs its first embedding product again, norms.h;
//         an embed's block 0 attention keeps, instead of its input, how
//         to make it again: the embed's input product, piece.h).
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
// where that is cheap to recompute, the core's FLOPs at most a quarter of
// the layer's four projections' (for self-attention of width d: at most
// d/2 keys a query); where keys are many, the core costs as much as the
// projections. What a rerun frees is never small next to the layer: the
// core's output has a row of heads · dh values for every query row (the
// layer's width in self-attention), and the decoder's cross-attention
// gathers keys and values of 9 times the latent's rows. (Until
// 2026-12-05 a layer whose rerun freed under 2^18 elements kept its
// output; measured again, those reruns cost nothing measurable at
// cpu_small and cut selective's peak there by a tenth:
// docs/recomputation.md.) The layers decide per call (attention.cpp), the
// FLOP count per piece (flops.cpp), by this one rule.
inline bool lean_reruns_core(double core_flops, double projection_flops) {
  return core_flops <= 0.25 * projection_flops;
}

}  // namespace wg
