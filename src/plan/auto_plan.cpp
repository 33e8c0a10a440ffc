// The automatic plan of a rank (see header).
#include "wg/plan/auto_plan.h"

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

AutoPlan choose_auto_plan(PlanProbe& probe, int64_t budget, const RankPlan& rules) {
  AutoPlan a;
  a.budget_bytes = budget;
  a.costs = profile_costs(probe);
  // Pieces a rule fixes are not the planner's to choose.
  for (auto& p : a.costs.pieces)
    if (rules.rule_sections.count(p.key.section)) p.forced = rules.plan.get(p.key) ? 1 : 0;
  PlannedRecompute chosen;
  const int64_t planned_budget = int64_t(std::floor(double(budget) * (1.0 - kModelMargin)));
  try {
    chosen = plan_for_budget(a.costs, planned_budget);
  } catch (const std::invalid_argument&) {
    chosen = plan_for_budget(a.costs, budget);  // only (nearly) everything recomputed fits: plan for the budget itself
  }
  a.plan = rules.plan;
  for (size_t i = 0; i < a.costs.pieces.size(); ++i) a.plan.set(a.costs.pieces[i].key, chosen.recompute[i]);
  std::vector<bool> on;
  for (const auto& p : a.costs.pieces) on.push_back(a.plan.get(p.key));
  a.predicted_peak_bytes = a.costs.peak(on);
  a.added_seconds = a.costs.added_seconds(on);
  return a;
}

}  // namespace wg
