// A checkpointable piece of a section, as the section's forward loop sees
// it: the function, the parameters it reads, and the plan's decision.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "wg/model/checkpoint.h"

namespace wg {

struct Piece {
  std::string key;  // the plan's key, e.g. "latent/block0.attn" (CheckpointPlan::key)
  PieceFn fn;
  std::vector<torch::Tensor> params;
  bool recompute = false;
};

// Sees every piece's forward (the cost profiler uses it). Not called inside
// the recomputation in backward.
class PieceObserver {
 public:
  virtual ~PieceObserver() = default;
  virtual void before(const std::string& key) = 0;
  virtual void after(const std::string& key, const torch::Tensor& output) = 0;
};

// Runs the pieces in order; the one call site of the plan in each section.
inline torch::Tensor run_pieces(const std::vector<Piece>& pieces, torch::Tensor x, PieceObserver* observer = nullptr) {
  for (const Piece& p : pieces) {
    if (observer) observer->before(p.key);
    x = run_piece(p.recompute, p.fn, x, p.params);
    if (observer) observer->after(p.key, x);
  }
  return x;
}

}  // namespace wg
