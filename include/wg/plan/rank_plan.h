// A rank's plan before training: the configured section settings, with the
// per-node rules that match this rank applied, resolved on the model's
// pieces. With gradient_checkpointing.policy auto this is where the
// automatic planner starts (auto_plan.h): it keeps what the rules set.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/dist/node_info.h"
#include "wg/plan/recompute_plan.h"

namespace wg {

struct RankPlan {
  RecomputePlan plan;
  std::vector<int> rules_applied;       // checkpoint_node_rules that match this rank
  std::set<std::string> rule_sections;  // sections those rules set
  bool automatic = false;               // gradient_checkpointing.policy: auto
  std::string rules_text() const;       // "0, 2" ("" when none)
};

// Throws std::invalid_argument naming the key of a bad block index, or
// where a piece list (global or any node rule's) names a piece the model
// lacks.
RankPlan plan_for_rank(const Config& config, const NodeInfo& node);

}  // namespace wg
