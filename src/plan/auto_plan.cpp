// The automatic plan of a rank (see header).
#include "wg/plan/auto_plan.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "wg/util/units.h"

namespace wg {

std::string AutoPlan::budget_text() const {
  return std::to_string(budget_bytes) + " bytes (" + std::to_string(double(budget_bytes) / kGiB) + " GiB)";
}

int64_t auto_budget_bytes(const AutoPlanConfig& c, int64_t available_bytes) {
  if (c.memory_budget_gib > 0) return int64_t(c.memory_budget_gib * kGiB);
  return available_bytes - int64_t(c.memory_margin_gib * kGiB);
}

namespace {
// The plan for `target`; below the smallest plan's prediction, the smallest plan.
PlannedRecompute plan_or_smallest(const CostModel& costs, int64_t target) {
  try {
    return plan_for_budget(costs, target);
  } catch (const std::invalid_argument&) {
    PlannedRecompute smallest;
    smallest.modes = smallest_plan(costs);
    return smallest;
  }
}
}  // namespace

AutoPlan choose_auto_plan(PlanProbe& probe, int64_t budget, const RankPlan& rules) {
  AutoPlan a;
  a.budget_bytes = budget;
  a.costs = profile_costs(probe);
  // Pieces a rule fixes are not the planner's to choose.
  for (auto& p : a.costs.pieces)
    if (rules.rule_sections.count(p.key.section)) p.forced = rules.plan.mode(p.key);
  int64_t target = int64_t(std::floor(double(budget) * (1.0 - kModelMargin)));
  PlannedRecompute chosen;
  try {
    chosen = plan_for_budget(a.costs, target);
  } catch (const std::invalid_argument&) {
    chosen = plan_for_budget(a.costs, budget);  // only (nearly) everything recomputed fits: plan for the budget itself
  }
  PlanRestorer restore(probe);
  for (;;) {
    a.plan = rules.plan;
    for (size_t i = 0; i < a.costs.pieces.size(); ++i) a.plan.set_mode(a.costs.pieces[i].key, chosen.modes[i]);
    PlanModes modes;
    for (const auto& p : a.costs.pieces) modes.push_back(a.plan.mode(p.key));
    a.predicted_peak_bytes = a.costs.peak(modes);
    a.added_seconds = a.costs.added_seconds(modes);
    probe.set_plan(a.plan);
    const int64_t measured = probe.probe_check_batches();
    a.checked_peak_bytes = measured < 0 ? -1 : a.costs.base_bytes + measured;
    // Nothing keeps less than the smallest plan: there is no plan to make again.
    const bool smallest = modes == smallest_plan(a.costs);
    if (!a.checked_over_budget() || a.replans == kPlanChecks || smallest) break;
    // The model under-predicted this mix of pieces (or another batch than the profiled one peaks
    // higher) by (checked - predicted): that much less room; after running out, another margin less.
    const int64_t error = measured < 0 ? int64_t(std::ceil(kModelMargin * double(budget)))
                                       : a.checked_peak_bytes - a.predicted_peak_bytes;
    target = std::min(target, a.predicted_peak_bytes) - std::max<int64_t>(1, error);
    chosen = plan_or_smallest(a.costs, target);
    ++a.replans;
  }
  return a;
}

}  // namespace wg
