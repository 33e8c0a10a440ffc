// The automatic planner's cost model, measured: a short profiling pass on
// the run's actual shapes (its planning batch: the one with the most tokens
// of its first eight, Trainer::planning_batch) with nothing recomputed, where a
// PieceObserver records, per plan piece, the bytes it keeps for backward
// (its output included), its output bytes, its parameters' gradient bytes,
// and its forward time; the same
// with every piece that can run lean lean (runs_lean), alternated with the
// first, for what each lean piece keeps and what lean adds to the step; and
// one with everything recomputed. An analytic estimate from the output
// shape is kept beside each measurement as a cross-check. Weights are not
// changed.
//
// The profiler drives the model through PlanProbe, which the trainer
// implements; no LibTorch here.
#pragma once

#include <cstdint>
#include <string>

#include "wg/plan/cost_model.h"
#include "wg/plan/observer.h"
#include "wg/plan/recompute_plan.h"

namespace wg {

class PlanProbe {
 public:
  virtual ~PlanProbe() = default;
  virtual const RecomputePlan& plan() const = 0;
  virtual void set_plan(const RecomputePlan& plan) = 0;
  // Forward and backward of the planning batch without exchanging gradients
  // or updating weights; gradients are zeroed after. Returns the peak bytes
  // above those held at its start. `observer` sees every piece (may be null).
  virtual int64_t probe(PieceObserver* observer) = 0;
  // With the current plan, the same on every batch a plan must fit (the
  // trainer: its first Trainer::kPlanningBatches, the profiled one among
  // them): the highest peak above the start, or -1 where one ran out of
  // memory.
  virtual int64_t probe_check_batches() = 0;
  // Of a piece's forward FLOPs, the share a recomputation runs again.
  virtual double rerun_share(const PieceKey& key) const = 0;
  // Of a piece's forward FLOPs, the share a lean run runs again (cheap
  // attention cores, AdaLayerNorms' first products; 0 for most pieces).
  virtual double lean_share(const PieceKey& key) const = 0;
  virtual int64_t current_bytes() const = 0;      // held now on the device
  virtual int64_t steady_base_bytes() const = 0;  // held at a step's start once training runs
  // The clock that times the probes and their pieces, in seconds: the
  // steady clock. (A made-up probe in the tests keeps its own time, so
  // that what the planner decides from the times does not depend on the
  // machine's load.)
  virtual double now_seconds() const;
};

// Puts the probe's plan back however the scope ends.
class PlanRestorer {
 public:
  explicit PlanRestorer(PlanProbe& probe) : probe_(probe), saved_(probe.plan()) {}
  ~PlanRestorer() { probe_.set_plan(saved_); }
  PlanRestorer(const PlanRestorer&) = delete;
  PlanRestorer& operator=(const PlanRestorer&) = delete;
  const RecomputePlan& saved() const { return saved_; }

 private:
  PlanProbe& probe_;
  RecomputePlan saved_;
};

// `repeats` probes with nothing recomputed after one warm-up probe, each
// followed by one with every piece lean that can be (none where no piece
// can); times are medians, bytes from the last probe; then one with
// everything recomputed. The probe's plan is restored afterwards.
CostModel profile_costs(PlanProbe& probe, int repeats = 3);

// The cost model as a table: piece, kept MiB, lean MiB, output MiB,
// gradient MiB, analytic MiB, forward ms, lean ms and recompute ms (both
// estimated).
std::string cost_table(const CostModel& costs);

}  // namespace wg
