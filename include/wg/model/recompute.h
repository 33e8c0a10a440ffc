// Activation recomputation for LibTorch, which has no checkpoint API of its
// own ("gradient checkpointing" in PyTorch's words).
//
// `run_piece` is the single place where a plan decision becomes behaviour:
// every section calls it once per piece in its forward loop (piece.h). With
// recompute=false it simply runs the piece. With recompute=true the piece
// runs without building a graph and keeps only its input; in backward it
// runs again, with the random generators restored to their state at the
// first run, so dropout draws the same masks and gradients are identical to
// running without recomputation. `rerun`, when given, is what backward
// runs instead of fn: the same piece, allowed to leave out work whose
// values its backward never reads (Saving::Rerun, saving.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <functional>

namespace wg {

// A piece maps one tensor to one tensor. It may read module parameters,
// which must all be passed as `params` so their gradients flow.
using PieceFn = std::function<at::Tensor(const at::Tensor&)>;

// Always recomputes (when grad mode is on). Prefer run_piece.
at::Tensor recomputed(const PieceFn& fn, const at::Tensor& x, at::TensorList params, const PieceFn& rerun = {});

at::Tensor run_piece(bool recompute, const PieceFn& fn, const at::Tensor& x, at::TensorList params,
                     const PieceFn& rerun = {});

}  // namespace wg
