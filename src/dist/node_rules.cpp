// Per-node checkpoint rules (see header).
#include "wg/dist/node_rules.h"

#include <fnmatch.h>

#include <algorithm>

namespace wg {

bool rule_matches(const NodeRuleMatch& m, const NodeInfo& node) {
  if (!m.hostname.empty() && fnmatch(m.hostname.c_str(), node.hostname.c_str(), 0) != 0) return false;
  if (!m.nodes.empty() && std::find(m.nodes.begin(), m.nodes.end(), node.node_index) == m.nodes.end()) return false;
  const double gib = double(node.device_memory_bytes) / double(1ll << 30);
  if (m.min_device_memory_gib >= 0 && gib < m.min_device_memory_gib) return false;
  if (m.max_device_memory_gib >= 0 && gib > m.max_device_memory_gib) return false;
  return true;
}

CheckpointConfig apply_node_rules(const Config& config, const NodeInfo& node, std::vector<int>* applied) {
  CheckpointConfig gc = config.gradient_checkpointing;
  for (size_t i = 0; i < config.checkpoint_node_rules.size(); ++i) {
    const NodeRule& r = config.checkpoint_node_rules[i];
    if (!rule_matches(r.match, node)) continue;
    for (auto section : {&CheckpointConfig::embed, &CheckpointConfig::latent, &CheckpointConfig::pred})
      if ((r.set.*section).set) gc.*section = r.set.*section;
    if (applied) applied->push_back(int(i));
  }
  return gc;
}

}  // namespace wg
