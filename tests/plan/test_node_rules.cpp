// Per-node recomputation rules: matching by host pattern, node index and
// device memory; later rules win; unset sections stay global.
#include <gtest/gtest.h>

#include "wg/config/recompute_sections.h"
#include "wg/plan/node_rules.h"
#include "wg/plan/rank_plan.h"
#include "wg/util/units.h"

namespace wg {
namespace {

NodeInfo node(const std::string& host, int index, double gib) {
  NodeInfo n;
  n.hostname = host;
  n.node_index = index;
  n.device_memory_bytes = int64_t(gib * kGiB);
  return n;
}

SectionRecompute mode(RecomputeMode m) {
  SectionRecompute s;
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
  c.gradient_checkpointing.embed = mode(RecomputeMode::Full);
  c.gradient_checkpointing.ae_global = mode(RecomputeMode::Selective);
  NodeRule big;  // WeatherGenerator's rule of thumb: >= 25 GiB, no embed recomputation
  big.match.min_device_memory_gib = 25;
  big.set.embed = mode(RecomputeMode::None);
  NodeRule node1;
  node1.match.nodes = {1};
  node1.set.embed = mode(RecomputeMode::EveryN);
  node1.set.pred = mode(RecomputeMode::Full);
  c.checkpoint_node_rules = {big, node1};

  const NodeSettings small0 = apply_node_rules(c, node("n0", 0, 16));
  EXPECT_TRUE(small0.rules_applied.empty());
  EXPECT_EQ(small0.sections.embed.mode, RecomputeMode::Full);

  const NodeSettings big0 = apply_node_rules(c, node("n0", 0, 80));
  EXPECT_EQ(big0.rules_applied, std::vector<int>{0});
  EXPECT_EQ(big0.sections.embed.mode, RecomputeMode::None);
  EXPECT_EQ(big0.sections.ae_global.mode, RecomputeMode::Selective);  // untouched
  EXPECT_EQ(big0.sections.ae_aggregation.mode, RecomputeMode::Full);  // the defaults, untouched
  EXPECT_EQ(big0.sections.pred.mode, RecomputeMode::EveryN);
  EXPECT_EQ(big0.rule_sections, std::set<std::string>{"embed"});

  const NodeSettings big1 = apply_node_rules(c, node("n1", 1, 80));
  EXPECT_EQ(big1.rules_applied, (std::vector<int>{0, 1}));
  EXPECT_EQ(big1.sections.embed.mode, RecomputeMode::EveryN);  // the later rule
  EXPECT_EQ(big1.sections.pred.mode, RecomputeMode::Full);
  EXPECT_EQ(big1.rule_sections, (std::set<std::string>{"embed", "pred"}));
}

TEST(NodeRules, EverySectionCanBeSetByARule) {
  Config c;
  StreamConfig st;
  st.name = "ERA5";
  st.embed.num_blocks = 2;
  st.target_readout.num_layers = 2;
  c.streams = {st};
  c.forecast_policy = "fixed";
  c.fe_num_blocks = 2;
  NodeRule all;  // node 2 recomputes everything, section by section
  all.match.nodes = {2};
  for (const auto& sec : recompute_sections()) all.set.*sec.field = mode(RecomputeMode::Full);
  NodeRule off;  // hosts "small*": the two sections without a boolean off
  off.match.hostname = "small*";
  off.set.ae_aggregation = mode(RecomputeMode::None);
  off.set.forecast = mode(RecomputeMode::None);
  c.checkpoint_node_rules = {all, off};

  const NodeSettings n2 = apply_node_rules(c, node("big", 2, 80));
  EXPECT_EQ(n2.rules_applied, std::vector<int>{0});
  EXPECT_EQ(n2.rule_sections.size(), recompute_sections().size());
  for (const auto& sec : recompute_sections()) {
    EXPECT_EQ((n2.sections.*sec.field).mode, RecomputeMode::Full) << sec.name;
    EXPECT_EQ(n2.rule_sections.count(sec.name), 1u) << sec.name;
  }
  const RankPlan p2 = plan_for_rank(c, node("big", 2, 80));
  EXPECT_EQ(p2.plan.pieces_recomputed(), p2.plan.pieces_total());
  EXPECT_EQ(p2.rules_text(), "0");

  const RankPlan small = plan_for_rank(c, node("small7", 0, 16));
  EXPECT_EQ(small.rule_sections, (std::set<std::string>{"ae_aggregation", "forecast"}));
  // Only the decoder blocks are left recomputed (the default every_n 1).
  for (size_t i = 0; i < small.plan.size(); ++i) {
    const PieceKey& k = small.plan.pieces()[i];
    EXPECT_EQ(small.plan.recomputed(i), k.section == "pred" && k.in_a_block()) << k.str();
  }
  // Both rules on node 2 of a small host: the later one wins for its sections.
  const NodeSettings both = apply_node_rules(c, node("small2", 2, 16));
  EXPECT_EQ(both.rules_applied, (std::vector<int>{0, 1}));
  EXPECT_EQ(both.sections.ae_aggregation.mode, RecomputeMode::None);
  EXPECT_EQ(both.sections.forecast.mode, RecomputeMode::None);
  EXPECT_EQ(both.sections.ae_adapter.mode, RecomputeMode::Full);
}

}  // namespace
}  // namespace wg
