// Per-node recomputation rules (see header).
#include "wg/plan/node_rules.h"

#include <fnmatch.h>

#include <algorithm>

#include "wg/config/recompute_sections.h"
#include "wg/util/units.h"

namespace wg {

bool rule_matches(const NodeRuleMatch& m, const NodeInfo& node) {
  if (!m.hostname.empty() && fnmatch(m.hostname.c_str(), node.hostname.c_str(), 0) != 0) return false;
  if (!m.nodes.empty() && std::find(m.nodes.begin(), m.nodes.end(), node.node_index) == m.nodes.end()) return false;
  const double gib = double(node.device_memory_bytes) / kGiB;
  if (m.min_device_memory_gib >= 0 && gib < m.min_device_memory_gib) return false;
  if (m.max_device_memory_gib >= 0 && gib > m.max_device_memory_gib) return false;
  return true;
}

NodeSettings apply_node_rules(const Config& config, const NodeInfo& node) {
  NodeSettings out;
  out.sections = config.gradient_checkpointing;
  for (size_t i = 0; i < config.checkpoint_node_rules.size(); ++i) {
    const NodeRule& r = config.checkpoint_node_rules[i];
    if (!rule_matches(r.match, node)) continue;
    for (const auto& sec : recompute_sections())
      if ((r.set.*sec.field).set) {
        out.sections.*sec.field = r.set.*sec.field;
        out.rule_sections.insert(sec.name);
      }
    out.rules_applied.push_back(int(i));
  }
  return out;
}

}  // namespace wg
