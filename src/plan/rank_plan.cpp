// A rank's plan from the configuration and the node rules (see header).
#include "wg/plan/rank_plan.h"

#include "wg/plan/node_rules.h"

namespace wg {

std::string RankPlan::rules_text() const {
  std::string out;
  for (int i : rules_applied) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out;
}

RankPlan plan_for_rank(const Config& config, const NodeInfo& node) {
  const std::vector<PieceKey> pieces = model_pieces(config);
  // Every rule's piece lists, those of rules this rank does not match too:
  // a wrong label fails on every rank alike.
  for (const auto& rule : config.checkpoint_node_rules) check_piece_lists(pieces, rule.set);
  const NodeSettings settings = apply_node_rules(config, node);
  RankPlan r;
  r.plan = resolve_plan(pieces, settings.sections);
  r.rules_applied = settings.rules_applied;
  r.rule_sections = settings.rule_sections;
  r.automatic = config.auto_plan.enabled;
  return r;
}

}  // namespace wg
