// Per-node recomputation rules (checkpoint_node_rules): which apply to this
// rank, and the section settings they produce. Applied once, before the
// plan is resolved; later rules win.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/dist/node_info.h"

namespace wg {

bool rule_matches(const NodeRuleMatch& match, const NodeInfo& node);

struct NodeSettings {
  RecomputeConfig sections;           // the global settings with the matching rules applied
  std::vector<int> rules_applied;     // indices of the rules that matched, in order
  std::set<std::string> rule_sections;  // sections a matching rule sets
};

NodeSettings apply_node_rules(const Config& config, const NodeInfo& node);

}  // namespace wg
