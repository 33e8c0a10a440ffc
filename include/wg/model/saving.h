// How a module that is not recomputed as a whole keeps what its backward
// needs (the plan's PieceMode::Keep and PieceMode::Lean, passed to the
// modules of a piece by run_pieces).
//   All   every activation autograd would keep;
//   Lean  only the inputs and outputs of the projections: pre-norms,
//         q/k norms, activations (GELU, its dropout) and the attention
//         core (its probabilities and output) are recomputed from them in
//         backward, no projection is run again (lean_ops.h; AdaLayerNorm runs its
//         first embedding product again, norms.h). Gradients are
//         bit-identical to All.
//   Rerun a recomputed piece's second run, in backward (PieceMode::Recompute):
//         keeps as All, but its last product (output_linear, lean_ops.h),
//         whose output nothing in the piece's backward reads, is not
//         computed: its gradients need only its input and weights. The
//         gradients stay bit-identical to All; only the piece's output
//         (of this run, which backward throws away) is not its value.
#pragma once

namespace wg {

enum class Saving { All, Lean, Rerun };

}  // namespace wg
