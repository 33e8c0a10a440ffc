// A checkpointable piece of a section, as the section's forward loop sees
// it: the function, the parameters it reads, and the plan's decision.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "wg/model/checkpoint.h"

namespace wg {

struct Piece {
  PieceFn fn;
  std::vector<torch::Tensor> params;
  bool recompute = false;
};

// Runs the pieces in order; the one call site of the plan in each section.
inline torch::Tensor run_pieces(const std::vector<Piece>& pieces, torch::Tensor x) {
  for (const Piece& p : pieces) x = run_piece(p.recompute, p.fn, x, p.params);
  return x;
}

}  // namespace wg
