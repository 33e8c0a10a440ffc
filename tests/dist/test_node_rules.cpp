// Per-node checkpoint rules: matching by host pattern, node index and
// device memory; later rules win; unset sections stay global.
#include <gtest/gtest.h>

#include "wg/dist/node_rules.h"

namespace wg {
namespace {

NodeInfo node(const std::string& host, int index, double gib) {
  NodeInfo n;
  n.hostname = host;
  n.node_index = index;
  n.device_memory_bytes = int64_t(gib * double(1ll << 30));
  return n;
}

SectionCheckpointConfig mode(CheckpointMode m) {
  SectionCheckpointConfig s;
  s.set = true;
  s.mode = m;
  return s;
}

TEST(NodeRules, Matching) {
  NodeRuleMatch m;
  EXPECT_TRUE(rule_matches(m, node("jwb0042", 3, 40)));  // no condition: every rank
  m.hostname = "jwb00[0-4]*";
  EXPECT_TRUE(rule_matches(m, node("jwb0042", 3, 40)));
  EXPECT_FALSE(rule_matches(m, node("jwb0052", 3, 40)));
  m.nodes = {1, 3};
  EXPECT_TRUE(rule_matches(m, node("jwb0042", 3, 40)));
  EXPECT_FALSE(rule_matches(m, node("jwb0042", 2, 40)));
  m = {};
  m.min_device_memory_gib = 25;
  EXPECT_TRUE(rule_matches(m, node("a", 0, 40)));
  EXPECT_TRUE(rule_matches(m, node("a", 0, 25)));
  EXPECT_FALSE(rule_matches(m, node("a", 0, 24.9)));
  m.max_device_memory_gib = 32;
  EXPECT_FALSE(rule_matches(m, node("a", 0, 40)));
}

TEST(NodeRules, LaterRulesWinAndOnlySetSectionsChange) {
  Config c;
  c.gradient_checkpointing.embed = mode(CheckpointMode::Full);
  c.gradient_checkpointing.latent = mode(CheckpointMode::Selective);
  NodeRule big;  // WeatherGenerator's rule of thumb: >= 25 GiB, no embed recomputation
  big.match.min_device_memory_gib = 25;
  big.set.embed = mode(CheckpointMode::None);
  NodeRule node1;
  node1.match.nodes = {1};
  node1.set.embed = mode(CheckpointMode::EveryN);
  node1.set.pred = mode(CheckpointMode::Full);
  c.checkpoint_node_rules = {big, node1};

  std::vector<int> applied;
  CheckpointConfig small0 = apply_node_rules(c, node("n0", 0, 16), &applied);
  EXPECT_TRUE(applied.empty());
  EXPECT_EQ(small0.embed.mode, CheckpointMode::Full);

  applied.clear();
  CheckpointConfig big0 = apply_node_rules(c, node("n0", 0, 80), &applied);
  EXPECT_EQ(applied, std::vector<int>{0});
  EXPECT_EQ(big0.embed.mode, CheckpointMode::None);
  EXPECT_EQ(big0.latent.mode, CheckpointMode::Selective);  // untouched

  applied.clear();
  CheckpointConfig big1 = apply_node_rules(c, node("n1", 1, 80), &applied);
  EXPECT_EQ(applied, (std::vector<int>{0, 1}));
  EXPECT_EQ(big1.embed.mode, CheckpointMode::EveryN);  // the later rule
  EXPECT_EQ(big1.pred.mode, CheckpointMode::Full);
}

}  // namespace
}  // namespace wg
