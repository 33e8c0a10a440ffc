// gradient_checkpointing.policy: auto. Measures the costs on the run's
// first batch, takes the rank's budget (configured, or the device's
// available memory minus a margin), and picks the fastest plan whose
// predicted step peak fits; sections that a matching per-node rule sets keep
// the rule's settings.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "wg/config/config.h"
#include "wg/data/batch.h"
#include "wg/model/checkpoint_plan.h"
#include "wg/model/memory_planner.h"

namespace wg {

class Trainer;

struct AutoPlan {
  CheckpointPlan plan;
  CostModel costs;
  int64_t budget_bytes = 0;
  int64_t predicted_peak_bytes = 0;
  double added_seconds = 0;
};

// The budget for this rank's device ("cpu" or "cuda:N").
int64_t auto_budget_bytes(const AutoPlanConfig& config, const std::string& device);

// The planner's own error margin: it plans for 95% of the budget (its peak
// model was within a few percent of measured peaks), or, when only the
// all-recompute plan fits that, for the budget itself.
constexpr double kModelMargin = 0.05;

// `rule_plan`: the plan resolved with the per-node rules; its pieces in
// `rule_sections` ("embed", "latent", "pred") win over the planner's.
// Throws std::invalid_argument when the budget is below the all-recompute peak.
AutoPlan choose_auto_plan(Trainer& trainer, const Batch& batch, int64_t budget_bytes,
                          const CheckpointPlan& rule_plan, const std::set<std::string>& rule_sections);

}  // namespace wg
