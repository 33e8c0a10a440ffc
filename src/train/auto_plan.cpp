// The automatic plan of a rank (see header).
#include "wg/train/auto_plan.h"

#include <cmath>
#include <stdexcept>

#include "wg/train/cost_profiler.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"

namespace wg {

namespace {
constexpr double kGiB = double(1ll << 30);

std::string section_of(const std::string& key) {
  if (key.rfind("embed.", 0) == 0) return "embed";
  return key.substr(0, key.find('/'));
}
}  // namespace

int64_t auto_budget_bytes(const AutoPlanConfig& c, const std::string& device) {
  if (c.memory_budget_gib > 0) return int64_t(c.memory_budget_gib * kGiB);
  const MemorySnapshot s = memory_snapshot(device);
  return s.available_bytes - int64_t(c.memory_margin_gib * kGiB);
}

AutoPlan choose_auto_plan(Trainer& trainer, const Batch& batch, int64_t budget, const CheckpointPlan& rule_plan,
                          const std::set<std::string>& rule_sections) {
  AutoPlan a;
  a.budget_bytes = budget;
  a.costs = profile_costs(trainer, batch);
  // Pieces a rule fixes are not the planner's to choose.
  for (auto& p : a.costs.pieces)
    if (rule_sections.count(section_of(p.key))) p.forced = rule_plan.get(p.key) ? 1 : 0;
  PlannedRecompute chosen;
  const int64_t planned_budget = int64_t(std::floor(double(budget) * (1.0 - kModelMargin)));
  auto plan = [&](int64_t b) { return plan_for_budget(a.costs, b); };
  try {
    chosen = plan(planned_budget);
  } catch (const std::invalid_argument&) {
    chosen = plan(budget);  // only (nearly) everything recomputed fits: plan for the budget itself
  }
  a.plan = rule_plan;
  for (size_t i = 0; i < a.costs.pieces.size(); ++i) {
    const std::string& key = a.costs.pieces[i].key;
    a.plan.set(key, chosen.recompute[i]);
  }
  std::vector<bool> on;
  for (const auto& p : a.costs.pieces) on.push_back(a.plan.get(p.key));
  a.predicted_peak_bytes = a.costs.peak(on);
  a.added_seconds = a.costs.added_seconds(on);
  trainer.set_plan(a.plan);
  trainer.set_prediction(a.predicted_peak_bytes, a.added_seconds);
  trainer.set_costs(a.costs, std::to_string(budget) + " bytes (" + std::to_string(double(budget) / kGiB) + " GiB)");
  return a;
}

}  // namespace wg
