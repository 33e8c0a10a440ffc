// Per-node checkpoint rules (checkpoint_node_rules): which apply to this
// rank, and the section settings they produce. Applied once, before the
// plan is resolved; later rules win.
#pragma once

#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/dist/context.h"

namespace wg {

bool rule_matches(const NodeRuleMatch& match, const NodeInfo& node);

// The checkpoint settings for this node; `applied` gets the indices of the
// rules that matched.
CheckpointConfig apply_node_rules(const Config& config, const NodeInfo& node, std::vector<int>* applied = nullptr);

}  // namespace wg
