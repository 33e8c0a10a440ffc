// A recomputable piece of a section, as the section's forward loop sees it:
// its key in the plan, the function (given how to keep its activations),
// every tensor it reads that needs a gradient besides its input (module
// parameters; another activation, such as the keys of a cross-attention),
// and the plan's decision (PieceMode). A section
// builds its pieces (once, or per call when they read per-call tensors) and
// runs them with run_pieces: its one call site of the plan.
#pragma once

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "wg/model/recompute.h"
#include "wg/model/saving.h"
#include "wg/plan/observer.h"
#include "wg/plan/recompute_plan.h"

namespace wg {

// A piece's function: its output from its input, keeping what `saving` says.
using PieceBody = std::function<torch::Tensor(const torch::Tensor&, Saving)>;

// How to make a tensor again, with the same bits, from what the closure
// holds (run without a graph): a lean piece's output that is far cheaper
// to make again than to keep.
using MakeAgain = std::function<torch::Tensor()>;
struct MadeOutput {
  torch::Tensor out;
  MakeAgain again;
};

struct Piece {
  PieceKey key;
  PieceBody fn;
  std::vector<torch::Tensor> params;  // parameters and other tensors fn reads that need gradients
  PieceMode mode = PieceMode::Keep;
  // Optional pair, for a lean piece followed by a lean piece (the embed's
  // input and its first attention): the first gives, with its output, how
  // to make it again (lean_remade_output); the next one keeps that instead
  // of its input (lean_from_remade). Either alone, or either piece not
  // lean, and they run as fn does.
  std::function<MadeOutput(const torch::Tensor&)> lean_remade_output = {};
  std::function<torch::Tensor(const torch::Tensor&, const MakeAgain&)> lean_from_remade = {};
};

// The plan's decision for each key (the plan must have every key).
inline std::vector<PieceMode> piece_modes(const std::vector<PieceKey>& keys, const RecomputePlan& plan) {
  std::vector<PieceMode> modes;
  for (const PieceKey& k : keys) modes.push_back(plan.mode(k));
  return modes;
}

// What every section module holds for the plan: its piece keys (forward
// order), the plan's decision for each, and the observer of its pieces.
class PlannedPieces {
 public:
  void set_plan(const RecomputePlan& plan) { modes_ = piece_modes(keys_, plan); }
  std::vector<PieceKey> piece_keys() const { return keys_; }
  void set_observer(PieceObserver* observer) { observer_ = observer; }

 protected:
  // Sets the keys; nothing recomputed until set_plan.
  void set_keys(std::vector<PieceKey> keys) {
    keys_ = std::move(keys);
    modes_.assign(keys_.size(), PieceMode::Keep);
  }
  std::vector<PieceKey> keys_;
  std::vector<PieceMode> modes_;
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
  for (Piece& p : pieces) p.mode = plan.mode(p.key);
}

// Runs one piece as its mode says: kept, lean, or recomputed in backward
// (where its second run, Saving::Rerun, keeps everything it builds, freed
// at once, and leaves out its last product, whose output backward never reads).
// Under LibTorch's profiler its second run in backward is a range named
// "recompute embed.ERA5/block0.attn" (run_pieces names the forward).
inline torch::Tensor run_one(const Piece& p, const torch::Tensor& x) {
  if (p.mode != PieceMode::Recompute) return p.fn(x, p.mode == PieceMode::Lean ? Saving::Lean : Saving::All);
  return run_piece(
      true, [fn = p.fn](const torch::Tensor& t) { return fn(t, Saving::All); }, x, p.params,
      [fn = p.fn, key = p.key](const torch::Tensor& t) {  // a copy: sections build their pieces per forward
        RECORD_USER_SCOPE("recompute " + key.str());
        return fn(t, Saving::Rerun);
      });
}

// The bytes of the gradients a piece's backward leaves for the optimizer:
// its parameters' (leaf tensors that need gradients; not the activations
// it reads, such as a cross-attention's keys, whose gradients pass on).
inline int64_t gradient_bytes(const Piece& p) {
  int64_t bytes = 0;
  for (const torch::Tensor& t : p.params)
    if (t.defined() && t.requires_grad() && t.is_leaf()) bytes += t.numel() * int64_t(t.element_size());
  return bytes;
}

// Runs the pieces in order; the one call site of the plan in each section.
// Where a lean piece says how to make its output again and the next one,
// lean too, takes that, the next one keeps that instead (Piece).
inline torch::Tensor run_pieces(const std::vector<Piece>& pieces, torch::Tensor x, PieceObserver* observer = nullptr) {
  MakeAgain again;  // how to make x again, where the lean piece that gave it said
  for (const Piece& p : pieces) {
    // Under LibTorch's profiler, a range named by the key ("embed.ERA5/block0.attn"; the
    // name is made only while a profiler records).
    RECORD_USER_SCOPE(p.key.str());
    if (observer) observer->before(p.key);
    const bool lean = p.mode == PieceMode::Lean;
    MakeAgain out_again;
    if (lean && again && p.lean_from_remade) {
      x = p.lean_from_remade(x, again);
    } else if (lean && p.lean_remade_output) {
      MadeOutput made = p.lean_remade_output(x);
      x = std::move(made.out);
      out_again = std::move(made.again);
    } else {
      x = run_one(p, x);
    }
    again = std::move(out_again);
    if (observer) observer->after(p.key, PieceOutput{x.sizes().vec(), int64_t(x.element_size()), gradient_bytes(p)});
  }
  return x;
}

}  // namespace wg
