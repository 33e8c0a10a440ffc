// How a module that is not recomputed as a whole keeps what its backward
// needs (the plan's PieceMode::Keep and PieceMode::Lean, passed to the
// modules of a piece by run_pieces).
//   All   every activation autograd would keep;
//   Lean  only the inputs and outputs of the matrix products: pre-norms,
//         q/k norms, activations (GELU, its dropout) and attention
//         probabilities are recomputed from them in backward, no
//         projection is run again (lean_ops.h; AdaLayerNorm runs its
//         first embedding product again, norms.h). Gradients are
//         bit-identical to All.
#pragma once

namespace wg {

enum class Saving { All, Lean };

}  // namespace wg
