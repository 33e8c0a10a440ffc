// The automatic plan of a rank (see header).
#include "wg/plan/auto_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
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
// How a checked plan ranks against another over the budget: the lower
// measured peak (running out of memory is the highest), then the lower
// prediction.
std::pair<int64_t, int64_t> check_rank(const AutoPlan& a) {
  return {a.checked_peak_bytes < 0 ? std::numeric_limits<int64_t>::max() : a.checked_peak_bytes,
          a.predicted_peak_bytes};
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
  // The last resorts, where no plan fits a lowered target: the smallest
  // plan, then, where that was checked over the budget (the model may be
  // wrong about the pair it runs lean), every piece recomputed.
  const PlanModes smallest = smallest_plan(a.costs), everything = a.costs.all(PieceMode::Recompute, true);
  bool smallest_checked = false, everything_checked = false;
  AutoPlan best;  // the checked plan that ranks lowest (check_rank)
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
    if (a.replans == 0 || check_rank(a) < check_rank(best)) best = a;
    smallest_checked = smallest_checked || modes == smallest;
    everything_checked = everything_checked || modes == everything;
    if (!a.checked_over_budget() || a.replans == kPlanChecks || (smallest_checked && everything_checked)) break;
    // The model under-predicted this mix of pieces (or another batch than the profiled one peaks
    // higher) by (checked - predicted): that much less room; after running out, another margin less.
    const int64_t error = measured < 0 ? int64_t(std::ceil(kModelMargin * double(budget)))
                                       : a.checked_peak_bytes - a.predicted_peak_bytes;
    target = std::min(target, a.predicted_peak_bytes) - std::max<int64_t>(1, error);
    try {
      chosen = plan_for_budget(a.costs, target);
    } catch (const std::invalid_argument&) {
      chosen.modes = smallest_checked ? everything : smallest;
    }
    ++a.replans;
  }
  if (a.checked_over_budget() && check_rank(best) < check_rank(a)) {  // keep the plan that measured lowest
    a.plan = best.plan;
    a.predicted_peak_bytes = best.predicted_peak_bytes;
    a.checked_peak_bytes = best.checked_peak_bytes;
    a.added_seconds = best.added_seconds;
  }
  return a;
}

}  // namespace wg
