// The cost model of recomputation: what each piece keeps for backward and
// costs to recompute, the step peak a plan is predicted to reach, the
// planner that picks the pieces to recompute for a memory budget, and the
// piece to add after an out-of-memory failure.
//
// Peak model (bytes). Pieces run in plan-key order (forward order). A piece
// keeps K_p for backward: retained_p without recomputation, only its output
// with it. When backward reaches piece p, the pieces before it still hold
// their K, and p holds all its activations (kept or rebuilt) plus gradient
// temporaries in proportion to them, so
//   peak(S) = base + max_p ( sum_{q<p} K_q(S) + (1 + alpha) retained_p ) + transient
// base: held at step start; alpha and transient (loss, glue outside the
// pieces) are calibrated so that the model reproduces both measured peaks,
// with nothing and with everything recomputed. Time: sum_{p in S}
// forward_seconds_p · rerun_share_p (a recomputation leaves out the
// piece's last product, and on the CPU kernel half of each attention core
// it runs as one joint pass with its backward: its share of the piece's
// FLOPs, from the count, wg/model/flops.h).
//
// plan_for_budget is exact over byte amounts on a grid of at most
// kPlannerGrid steps (rounded to the safe side): a dynamic program over the
// pieces in order, with the running sum of kept bytes as its state. No
// LibTorch here: costs come from the profiler (wg/plan/cost_profile.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wg/plan/piece_key.h"

namespace wg {

struct PieceCost {
  PieceKey key;
  int64_t retained_bytes = 0; // kept after the piece's forward, output included (nothing recomputed)
  int64_t output_bytes = 0;
  double forward_seconds = 0; // one forward of the piece
  double rerun_share = 1;     // of its FLOPs, what a recomputation runs again (wg/model/flops.h)
  int64_t analytic_bytes = -1;  // estimate from shapes (cross-check), -1: none
  int forced = -1;              // -1: the planner chooses; 0 / 1: fixed off / on (a per-node rule)
  int64_t saved_bytes() const { return retained_bytes > output_bytes ? retained_bytes - output_bytes : 0; }
  double recompute_seconds() const { return forward_seconds * rerun_share; }  // estimated
};

struct CostModel {
  std::vector<PieceCost> pieces;  // in the plan's (forward) order
  int64_t base_bytes = 0;
  int64_t activations_none_bytes = 0;  // measured step peak above base, nothing recomputed
  int64_t activations_all_bytes = 0;   // ... everything recomputed (0: unknown, alpha stays 0)
  double alpha = 0;
  int64_t transient = 0;
  void calibrate();                                         // sets alpha and transient
  int64_t peak(const std::vector<bool>& recompute) const;   // the model above
  double added_seconds(const std::vector<bool>& recompute) const;
};

struct PlannedRecompute {
  std::vector<bool> recompute;  // per CostModel::pieces
  int64_t predicted_peak_bytes = 0;
  double added_seconds = 0;
};

constexpr int kPlannerGrid = 20000;

// Throws std::invalid_argument naming the budget and the smallest predicted
// peak when even recomputing everything does not fit.
PlannedRecompute plan_for_budget(const CostModel& costs, int64_t budget_bytes);

// The piece to recompute next after an out-of-memory failure: among those
// not yet recomputed that free at least 1% of what is still freeable, the
// one freeing the most bytes per second of recompute. -1 when every piece is
// already recomputed.
int next_piece_to_recompute(const CostModel& costs, const std::vector<bool>& recompute);

}  // namespace wg
