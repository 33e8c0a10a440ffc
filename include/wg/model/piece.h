// A recomputable piece of a section, as the section's forward loop sees it:
// its key in the plan, the function, every tensor it reads that needs a
// gradient besides its input (module parameters; another activation, such
// as the keys of a cross-attention), and the plan's decision. A section
// builds its pieces (once, or per call when they read per-call tensors) and
// runs them with run_pieces: its one call site of the plan.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "wg/model/recompute.h"
#include "wg/plan/observer.h"
#include "wg/plan/recompute_plan.h"

namespace wg {

struct Piece {
  PieceKey key;
  PieceFn fn;
  std::vector<torch::Tensor> params;  // parameters and other tensors fn reads that need gradients
  bool recompute = false;
};

// The plan's decision for each key (the plan must have every key).
inline std::vector<bool> recompute_flags(const std::vector<PieceKey>& keys, const RecomputePlan& plan) {
  std::vector<bool> on;
  for (const PieceKey& k : keys) on.push_back(plan.get(k));
  return on;
}

// What every section module holds for the plan: its piece keys (forward
// order), the plan's decision for each, and the observer of its pieces.
class PlannedPieces {
 public:
  void set_plan(const RecomputePlan& plan) { recompute_ = recompute_flags(keys_, plan); }
  std::vector<PieceKey> piece_keys() const { return keys_; }
  void set_observer(PieceObserver* observer) { observer_ = observer; }

 protected:
  // Sets the keys; nothing recomputed until set_plan.
  void set_keys(std::vector<PieceKey> keys) {
    keys_ = std::move(keys);
    recompute_.assign(keys_.size(), false);
  }
  std::vector<PieceKey> keys_;
  std::vector<bool> recompute_;
  PieceObserver* observer_ = nullptr;
};

// The parameters of a module followed by more tensors.
inline std::vector<torch::Tensor> with_params(const torch::nn::Module& m, std::vector<torch::Tensor> more = {}) {
  std::vector<torch::Tensor> out = m.parameters();
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

// The pieces' keys, in order.
inline std::vector<PieceKey> keys_of(const std::vector<Piece>& pieces) {
  std::vector<PieceKey> keys;
  for (const Piece& p : pieces) keys.push_back(p.key);
  return keys;
}

// Each piece takes the plan's decision for its key.
inline void apply_plan(std::vector<Piece>& pieces, const RecomputePlan& plan) {
  for (Piece& p : pieces) p.recompute = plan.get(p.key);
}

// Runs the pieces in order; the one call site of the plan in each section.
inline torch::Tensor run_pieces(const std::vector<Piece>& pieces, torch::Tensor x, PieceObserver* observer = nullptr) {
  for (const Piece& p : pieces) {
    if (observer) observer->before(p.key);
    x = run_piece(p.recompute, p.fn, x, p.params);
    if (observer) observer->after(p.key, PieceOutput{x.sizes().vec(), int64_t(x.element_size())});
  }
  return x;
}

}  // namespace wg
