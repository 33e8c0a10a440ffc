// gradient_checkpointing.policy: auto. Measures the costs on the run's
// largest batch of its first eight (cost_profile.h,
// Trainer::planning_batch), takes the rank's budget (configured, or the
// device's available memory minus a margin), and picks the fastest plan
// whose predicted step peak fits, each piece kept, lean or recomputed
// (cost_model.h); sections that a matching per-node rule
// sets keep the rule's settings. The chosen plan is then run once on each
// batch the planner chose from; where the highest measured peak exceeds
// the budget (the model under-predicted that mix of pieces, or another
// batch peaks higher than the profiled one) or one runs out of memory, the
// planner plans again with the target lowered by the error it saw (by
// another margin after running out), up to kPlanChecks times. Where no
// plan fits the lowered target it checks the smallest plan (cost_model.h's
// smallest_plan), then every piece recomputed; it stops when both are
// over the budget.
#pragma once

#include <cstdint>
#include <string>

#include "wg/config/config.h"
#include "wg/plan/cost_model.h"
#include "wg/plan/cost_profile.h"
#include "wg/plan/rank_plan.h"

namespace wg {

struct AutoPlan {
  RecomputePlan plan;
  CostModel costs;
  int64_t budget_bytes = 0;
  int64_t predicted_peak_bytes = 0;
  // Measured with `plan` on the batches the planner chose from (the highest;
  // absolute, as the prediction); -1: one of them ran out of memory.
  int64_t checked_peak_bytes = 0;
  int replans = 0;  // plans made again because a check exceeded the budget
  bool checked_over_budget() const { return checked_peak_bytes < 0 || checked_peak_bytes > budget_bytes; }
  double added_seconds = 0;
  std::string budget_text() const;  // "5242880 bytes (0.005 GiB)"
};

// The budget: memory_budget_gib, or the device's available bytes minus
// memory_margin_gib.
int64_t auto_budget_bytes(const AutoPlanConfig& config, int64_t available_bytes);

// The planner's own error margin: it plans for 95% of the budget (its peak
// model was within a few percent of measured peaks), or, when no plan fits
// that, for the budget itself.
constexpr double kModelMargin = 0.05;
// Plans made again at most, after the first, when a checked peak exceeds the budget.
constexpr int kPlanChecks = 3;

// `rules`: the rank's plan with the node rules applied; its pieces in
// rules.rule_sections win over the planner's. The probe's plan is left as
// it was. Where every check exceeds the budget, the plan that measured
// lowest is kept (ties and running out of memory: the lower prediction;
// checked_peak_bytes says by how much; the out-of-memory fallback is there
// for a device). The checks leave out the optimizer step, which the
// probes do not run. Throws std::invalid_argument when the budget is below the
// smallest plan's predicted peak.
AutoPlan choose_auto_plan(PlanProbe& probe, int64_t budget_bytes, const RankPlan& rules);

}  // namespace wg
