// The cost model of recomputation: what each piece keeps for backward and
// costs to recompute, the step peak a plan is predicted to reach, the
// planner that picks each piece's mode for a memory budget, and the piece
// to add after an out-of-memory failure.
//
// Each piece has up to three modes (wg/plan/recompute_plan.h): kept
// (PieceMode::Keep), lean (Lean: its products run once, its norms,
// activations and cheap attention cores run again in backward; only pieces
// that can, runs_lean) and recomputed (Recompute).
//
// Peak model (bytes). Pieces run in plan-key order (forward order). A piece
// keeps K_p for backward: retained_p kept, lean_p lean, only its output
// recomputed. When backward reaches piece p, the pieces before it still
// hold their K, p holds all its activations (kept or rebuilt) plus
// gradient temporaries in proportion to them, and the parameters'
// gradients G of the pieces after it are held, so
//   peak(S) = base + max_p ( sum_{q<p} K_q(S) + (1 + a_p) retained_p + sum_{q>p} G_q ) + transient
// (a step sets the gradients to none, so backward allocates them again);
// a_p is alpha where p is recomputed (its rerun's activations and its
// backward's at once), alpha_kept where not (from -0.5: a piece's backward
// can let some of its activations go before its peak). base: held at step start;
// transient (loss, glue outside the pieces), alpha_kept and alpha are
// calibrated so that the model reproduces the measured peaks with nothing
// recomputed, with every piece that can lean lean, and with everything
// recomputed (without lean pieces, one alpha for both from the first and
// the last).
//
// Time added to a step: a recomputed piece, forward_seconds_p ·
// rerun_share_p (a recomputation leaves out the piece's last product, and
// on the CPU kernel half of each attention core it runs as one joint pass
// with its backward: its share of the piece's FLOPs, from the count,
// wg/model/flops.h); a lean piece, forward_seconds_p · lean_share_p (the
// products it runs again, from the same count) plus lean_seconds_per_byte
// for each byte it does not keep (the norms and activations it makes
// again: elementwise work the FLOP count leaves out), calibrated so that
// the sum over every lean piece is what the all-lean probe measured.
//
// plan_for_budget is exact over byte amounts on a grid of steps of
// 1/kPlannerGrid of all the pieces keep without recomputation (each
// piece's bytes rounded up, to the safe side): a dynamic program over the
// pieces in order, with the running sum of kept bytes, and whether the
// piece before is lean_with_next and lean, as its state. No LibTorch here:
// costs come from the profiler (wg/plan/cost_profile.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wg/plan/piece_key.h"
#include "wg/plan/recompute_plan.h"

namespace wg {

using PlanModes = std::vector<PieceMode>;  // one per CostModel::pieces

struct PieceCost {
  PieceKey key;
  int64_t retained_bytes = 0; // kept after the piece's forward, output included (nothing recomputed)
  int64_t output_bytes = 0;
  double forward_seconds = 0; // one forward of the piece
  double rerun_share = 1;     // of its FLOPs, what a recomputation runs again (wg/model/flops.h)
  int64_t lean_bytes = -1;    // kept when it runs lean, output included; -1: it cannot run lean
  int64_t gradient_bytes = 0;  // its parameters' gradients, held from its backward to the optimizer step
  double lean_share = 0;      // of its FLOPs, what a lean run runs again (wg/model/flops.h)
  // Lean frees its output only together with the next piece lean: an
  // embed's input, whose output a lean block 0 attention makes again
  // instead of keeping it (model/piece.h). The profile books what that
  // frees to the input's lean_bytes; lean with the next piece not lean, it
  // keeps its output as well (CostModel::kept_bytes).
  bool lean_with_next = false;
  int64_t analytic_bytes = -1;  // estimate from shapes (cross-check), -1: none
  std::optional<PieceMode> forced;  // set: fixed by a per-node rule; else the planner chooses
  bool can_run_lean() const { return lean_bytes >= 0; }
  // What the piece holds for backward in `mode` (lean where it cannot: kept).
  int64_t kept_bytes(PieceMode mode) const;
  // The bytes a lean run does not keep, which its backward makes again.
  int64_t lean_rebuilt_bytes() const { return can_run_lean() ? std::max<int64_t>(0, retained_bytes - lean_bytes) : 0; }
  double recompute_seconds() const { return forward_seconds * rerun_share; }  // estimated
};

struct CostModel {
  std::vector<PieceCost> pieces;  // in the plan's (forward) order
  int64_t base_bytes = 0;
  int64_t activations_none_bytes = 0;  // measured step peak above base, nothing recomputed
  int64_t activations_all_bytes = 0;   // ... everything recomputed (0: unknown, alpha stays 0)
  int64_t activations_lean_bytes = 0;  // ... every piece that can lean lean (0: not measured)
  double alpha = 0, alpha_kept = 0;
  int64_t transient = 0;
  double lean_seconds_per_byte = 0;  // calibrate_lean
  void calibrate();                  // sets alpha, alpha_kept and transient
  // Sets lean_seconds_per_byte so that running every piece that can lean
  // adds `measured_seconds` to a step (what the FLOP count's lean reruns
  // leave of it, spread over the bytes the lean pieces make again; never
  // below 0).
  void calibrate_lean(double measured_seconds);
  // What piece i keeps in the plan: its mode's bytes, and its output too
  // where it is lean_with_next and lean but the next piece is not.
  int64_t kept_bytes(const PlanModes& modes, size_t i) const;
  int64_t peak(const PlanModes& modes) const;  // the model above
  double added_seconds(size_t piece, PieceMode mode) const;
  double added_seconds(const PlanModes& modes) const;
  // Every piece in `mode` where it can be (lean: where it can run lean; the
  // others kept); `forced` pieces keep their mode when `rules` is set.
  PlanModes all(PieceMode mode, bool rules = false) const;
};

struct PlannedRecompute {
  PlanModes modes;  // per CostModel::pieces
  int64_t predicted_peak_bytes = 0;
  double added_seconds = 0;
};

constexpr int kPlannerGrid = 20000;

// The plan that keeps the least for backward: every piece recomputed that
// no rule fixes, but a lean_with_next piece and the next one lean where
// that predicts a lower peak. The first of the automatic planner's last
// resorts (auto_plan.h).
PlanModes smallest_plan(const CostModel& costs);

// The fastest plan that fits the budget (where the grid's rounding rules
// out every plan, smallest_plan or the lowest-peak plan if it fits).
// Throws std::invalid_argument where no plan fits, naming the budget and
// the lowest predicted peak of any plan (found down to the grid; it can
// lie below smallest_plan's, as a recomputed piece's backward holds more
// than a kept one's: alpha against alpha_kept).
PlannedRecompute plan_for_budget(const CostModel& costs, int64_t budget_bytes);

// The piece to recompute next after an out-of-memory failure: among those
// not yet recomputed nor fixed by a rule that free at least 1% of what is
// still freeable, the one freeing the most bytes (from what it keeps in
// its present mode) per second it adds (its recompute time less the time
// its present mode adds). -1 when every piece is already recomputed.
int next_piece_to_recompute(const CostModel& costs, const PlanModes& modes);

}  // namespace wg
