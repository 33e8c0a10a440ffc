// Configuration loader, per-node checkpointing rules (checkpoint_node_rules),
// ddp_bucket_mb and fault_injection: valid forms and one message per kind of
// malformed rule.
#include "config_fixture.h"
#include "wg/plan/node_rules.h"
#include "wg/plan/rank_plan.h"

using namespace wg;
using namespace wg::config_test;
namespace fs = std::filesystem;

namespace {

// The rule file of the brief plus every other form; with_streams puts
// `streams_directory` on line 1, so the list starts on line 2.
const char* kRules =
    "checkpoint_node_rules:\n"
    "  - match: {device_memory_gib_min: 25}\n"                                      // 3
    "    set: {embed: none}\n"                                                      // 4
    "  - match: {hostname: \"jwb0[0-4]*\", nodes: [0, 3], device_memory_gib_max: 40}\n"  // 5
    "    set: {ae_global: {mode: every_n, every_n: 2}, pred: full}\n"               // 6
    "  - set:\n"                                                                    // 7
    "      embed: {mode: selective, blocks: [0, 2]}\n"                              // 8
    "      ae_global:\n"                                                            // 9
    "        mode: full\n"                                                          // 10
    "        blocks: [7]\n"                                                         // 11
    "      pred: {}\n"                                                              // 12
    "  - match: {}\n"                                                               // 13
    "    set: {ae_global: selective, ae_local: full, ae_adapter: {mode: none, blocks: [1]},"
    " ae_aggregation: none, forecast: {mode: every_n, every_n: 2}}\n"                // 14
    "ddp_bucket_mb: 12.5\n"                                                         // 15
    "fault_injection: {rank: 1, step: 7}\n";                                        // 16

}  // namespace

// ---- valid rules -----------------------------------------------------------

TEST_F(ConfigTest, NodeRulesDefaultsBucketAndFault) {
  const Config c = load_config(files({}));
  EXPECT_TRUE(c.checkpoint_node_rules.empty());
  EXPECT_DOUBLE_EQ(c.ddp_bucket_mb, 25);
  EXPECT_EQ(c.fault_injection.rank, -1);
  EXPECT_EQ(c.fault_injection.step, -1);
  const std::string y = resolved_config_yaml(files({}));
  for (const char* key : {"checkpoint_node_rules: []", "ddp_bucket_mb: 25", "  rank: -1", "  step: -1"})
    EXPECT_NE(y.find(key), std::string::npos) << key << "\n" << y;
}

TEST_F(ConfigTest, NodeRulesEveryForm) {
  const auto f = with_streams("a.yml", kRules);
  Config c;
  EXPECT_TRUE(warnings_of([&] { c = load_config(files({f})); }).empty());
  EXPECT_DOUBLE_EQ(c.ddp_bucket_mb, 12.5);
  EXPECT_EQ(c.fault_injection.rank, 1);
  EXPECT_EQ(c.fault_injection.step, 7);
  ASSERT_EQ(c.checkpoint_node_rules.size(), 4u);

  const NodeRule& r0 = c.checkpoint_node_rules[0];
  EXPECT_EQ(r0.origin.str(), f + ":3");
  EXPECT_EQ(r0.match.hostname, "");
  EXPECT_TRUE(r0.match.nodes.empty());
  EXPECT_DOUBLE_EQ(r0.match.min_device_memory_gib, 25);
  EXPECT_DOUBLE_EQ(r0.match.max_device_memory_gib, -1);
  EXPECT_TRUE(r0.set.embed.set);
  EXPECT_EQ(r0.set.embed.mode, RecomputeMode::None);
  EXPECT_EQ(r0.set.embed.origin.str(), f + ":4");
  for (const auto& sec : recompute_sections())
    if (sec.name != "embed") EXPECT_FALSE((r0.set.*sec.field).set) << sec.name;

  const NodeRule& r1 = c.checkpoint_node_rules[1];
  EXPECT_EQ(r1.origin.str(), f + ":5");
  EXPECT_EQ(r1.match.hostname, "jwb0[0-4]*");
  EXPECT_EQ(r1.match.nodes, (std::vector<int>{0, 3}));
  EXPECT_DOUBLE_EQ(r1.match.min_device_memory_gib, -1);
  EXPECT_DOUBLE_EQ(r1.match.max_device_memory_gib, 40);
  EXPECT_FALSE(r1.set.embed.set);
  EXPECT_TRUE(r1.set.ae_global.set);
  EXPECT_EQ(r1.set.ae_global.mode, RecomputeMode::EveryN);
  EXPECT_EQ(r1.set.ae_global.every_n, 2);
  EXPECT_FALSE(r1.set.ae_local.set);
  EXPECT_TRUE(r1.set.pred.set);
  EXPECT_EQ(r1.set.pred.mode, RecomputeMode::Full);

  const NodeRule& r2 = c.checkpoint_node_rules[2];
  EXPECT_EQ(r2.origin.str(), f + ":7");
  EXPECT_EQ(r2.match.hostname, "");
  EXPECT_DOUBLE_EQ(r2.match.min_device_memory_gib, -1);
  EXPECT_EQ(r2.set.embed.mode, RecomputeMode::Selective);
  EXPECT_EQ(r2.set.embed.blocks, (std::vector<int>{0, 2}));
  EXPECT_EQ(r2.set.ae_global.mode, RecomputeMode::Full);
  EXPECT_EQ(r2.set.ae_global.blocks, std::vector<int>{7});
  EXPECT_EQ(r2.set.ae_global.origin.str(), f + ":10");  // the mode's line, as in the structured form
  EXPECT_TRUE(r2.set.pred.set);  // `pred: {}`: set, mode none
  EXPECT_EQ(r2.set.pred.mode, RecomputeMode::None);

  const NodeRule& r3 = c.checkpoint_node_rules[3];
  EXPECT_EQ(r3.origin.str(), f + ":13");
  EXPECT_TRUE(r3.match.nodes.empty());
  EXPECT_EQ(r3.set.ae_global.mode, RecomputeMode::Selective);
  EXPECT_FALSE(r3.set.embed.set);
  EXPECT_FALSE(r3.set.pred.set);
  EXPECT_EQ(r3.set.ae_local.mode, RecomputeMode::Full);
  EXPECT_EQ(r3.set.ae_adapter.mode, RecomputeMode::None);
  EXPECT_EQ(r3.set.ae_adapter.blocks, std::vector<int>{1});
  EXPECT_TRUE(r3.set.ae_aggregation.set);
  EXPECT_EQ(r3.set.ae_aggregation.mode, RecomputeMode::None);
  EXPECT_EQ(r3.set.forecast.mode, RecomputeMode::EveryN);
  EXPECT_EQ(r3.set.forecast.every_n, 2);

  // The global sections are untouched by the rules.
  for (const auto& sec : recompute_sections()) EXPECT_FALSE((c.gradient_checkpointing.*sec.field).set) << sec.name;
  EXPECT_EQ(c.gradient_checkpointing.embed.mode, RecomputeMode::None);
  EXPECT_EQ(c.gradient_checkpointing.ae_aggregation.mode, RecomputeMode::Full);
}

TEST_F(ConfigTest, NodeRulesGlobsAccepted) {
  for (const char* glob : {"jwb*", "node[!0-3]?", "gpu[[:digit:]]", "a\\[literal", "x[]]y", "[^a]b"}) {
    const std::string arg = std::string("checkpoint_node_rules=[{match: {hostname: '") + glob + "'}, set: {pred: full}}]";
    const Config c = load_config(sets({arg}));
    ASSERT_EQ(c.checkpoint_node_rules.size(), 1u) << glob;
    EXPECT_EQ(c.checkpoint_node_rules[0].match.hostname, glob);
  }
}

TEST_F(ConfigTest, NodeRulesListIsReplacedAsAWhole) {
  const auto a = write("a.yml", "checkpoint_node_rules:\n  - set: {embed: none}\n  - set: {pred: full}\n");
  const auto b = write("b.yml", "seed: 3\ncheckpoint_node_rules:\n  - match: {nodes: [2]}\n    set: {ae_global: full}\n");
  const Config c = load_config(files({a, b}));
  ASSERT_EQ(c.checkpoint_node_rules.size(), 1u);
  EXPECT_EQ(c.checkpoint_node_rules[0].origin.str(), b + ":3");
  EXPECT_EQ(c.checkpoint_node_rules[0].match.nodes, std::vector<int>{2});
  EXPECT_TRUE(load_config(files({a}, {"checkpoint_node_rules=[]"})).checkpoint_node_rules.empty());
  const std::string arg = "checkpoint_node_rules=[{set: {embed: full}}]";
  const Config s = load_config(files({a}, {arg}));
  ASSERT_EQ(s.checkpoint_node_rules.size(), 1u);
  EXPECT_EQ(s.checkpoint_node_rules[0].origin.str(), "--set '" + arg + "'");
  EXPECT_EQ(s.checkpoint_node_rules[0].set.embed.mode, RecomputeMode::Full);
}

TEST_F(ConfigTest, BucketAndFaultOverrides) {
  const Config c = load_config(sets({"ddp_bucket_mb=100", "fault_injection.rank=0", "fault_injection={step: 12}"}));
  EXPECT_DOUBLE_EQ(c.ddp_bucket_mb, 100);
  EXPECT_EQ(c.fault_injection.rank, 0);
  EXPECT_EQ(c.fault_injection.step, 12);
}

TEST_F(ConfigTest, ResolvedYamlWithNodeRulesLoadsBack) {
  const auto f = with_streams("a.yml", kRules);
  for (const ConfigSources& s : {files({f}), files({f}, {"checkpoint_node_rules=[{match: {hostname: 'a[bc]*'}, "
                                                         "set: {embed: {mode: every_n, every_n: 3}}}]"})}) {
    const std::string y = resolved_config_yaml(s);
    ConfigSources back;
    back.files = {write("resolved.yml", y)};
    back.include_defaults = false;
    const Config again = load_config(back);
    EXPECT_EQ(dump(again), dump(load_config(s))) << y;
    EXPECT_FALSE(again.checkpoint_node_rules.empty()) << y;
  }
}

// The legacy section name `latent` under `set` is ae_global, with a warning
// naming the rule; the rule applies to ae_global on the matching ranks.
TEST_F(ConfigTest, NodeRuleLegacyLatentIsAeGlobalWithAWarning) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - match: {nodes: [1]}\n"
                                "    set: {embed: full, latent: {mode: every_n, every_n: 4}}\n");
  Config c;
  const auto w = warnings_of([&] { c = load_config(files({f})); });
  ASSERT_EQ(c.checkpoint_node_rules.size(), 1u);
  const RecomputeConfig& set = c.checkpoint_node_rules[0].set;
  EXPECT_TRUE(set.ae_global.set);
  EXPECT_EQ(set.ae_global.mode, RecomputeMode::EveryN);
  EXPECT_EQ(set.ae_global.every_n, 4);
  EXPECT_EQ(set.ae_global.origin.str(), f + ":3");
  EXPECT_TRUE(set.embed.set);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], f + ":3: checkpoint_node_rules[0].set.latent is the old name of checkpoint_node_rules[0].set.ae_global: "
                      "please rename it");
  // Its problems name the key as written.
  const auto g = write("b.yml", "checkpoint_node_rules: [{set: {latent: sometimes}}]\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: checkpoint_node_rules[0].set.latent must be one of "
                                         "none|full|selective|every_n, got 'sometimes'");
  // The effect: node 1 recomputes ae_global blocks 0 and 4, node 0 keeps the global setting.
  NodeInfo n1;
  n1.hostname = "h1";
  n1.node_index = 1;
  const NodeSettings on1 = apply_node_rules(c, n1);
  EXPECT_EQ(on1.rules_applied, std::vector<int>{0});
  EXPECT_EQ(on1.rule_sections, (std::set<std::string>{"embed", "ae_global"}));
  EXPECT_EQ(on1.sections.ae_global.mode, RecomputeMode::EveryN);
  const RankPlan p1 = plan_for_rank(c, n1);
  for (int b = 0; b < 8; ++b)
    EXPECT_EQ(p1.plan.get(PieceKey::in_block("ae_global", "", b, PieceKind::Mlp)), b % 4 == 0) << b;
  NodeInfo n0 = n1;
  n0.node_index = 0;
  const RankPlan p0 = plan_for_rank(c, n0);
  EXPECT_TRUE(p0.rules_applied.empty());
  for (int b = 0; b < 8; ++b) EXPECT_FALSE(p0.plan.get(PieceKey::in_block("ae_global", "", b, PieceKind::Mlp))) << b;
}

// A rule's section may name pieces too: on the matching node they are
// recomputed whole on top of the rule's mode; elsewhere the global setting.
TEST_F(ConfigTest, NodeRulePieceList) {
  const auto f = with_streams("a.yml",
                              "gradient_checkpointing: {ae_global: selective}\n"
                              "checkpoint_node_rules:\n"
                              "  - match: {nodes: [1]}\n"
                              "    set: {ae_global: {mode: selective, pieces: [block2.mlp]}}\n");
  const Config c = load_config(files({f}));
  ASSERT_EQ(c.checkpoint_node_rules.size(), 1u);
  EXPECT_EQ(c.checkpoint_node_rules[0].set.ae_global.pieces, std::vector<std::string>{"block2.mlp"});
  EXPECT_EQ(c.checkpoint_node_rules[0].set.ae_global.pieces_origin.str(), f + ":5");
  NodeInfo n1;
  n1.hostname = "h1";
  n1.node_index = 1;
  const auto mlp2 = PieceKey::in_block("ae_global", "", 2, PieceKind::Mlp);
  EXPECT_EQ(plan_for_rank(c, n1).plan.mode(mlp2), PieceMode::Recompute);
  NodeInfo n0 = n1;
  n0.node_index = 0;
  EXPECT_EQ(plan_for_rank(c, n0).plan.mode(mlp2), PieceMode::Lean);
  // A label the section lacks fails on every rank, those the rule does not match too.
  const auto h =
      with_streams("c.yml", "checkpoint_node_rules: [{match: {nodes: [1]}, set: {ae_local: {pieces: [head]}}}]\n");
  const Config bad = load_config(files({h}));
  try {
    plan_for_rank(bad, n0);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), h + ":2: ae_local.pieces names 'head', which is not a piece of the ae_local "
                                         "section (its pieces: block0.attn, block0.mlp, block1.attn, block1.mlp)");
  }
  const auto g = write("b.yml", "checkpoint_node_rules: [{set: {ae_global: {pieces: {a: 1}}}}]\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: checkpoint_node_rules[0].set.ae_global.pieces must be a list of the "
                                         "section's piece labels (such as block1.attn, input), got the map {a: 1}");
}

// The legacy name's block indices are checked when the configuration is
// loaded, as ae_global's are.
TEST_F(ConfigTest, NodeRuleLegacyLatentBlockOutOfRange) {
  const auto f = write("a.yml", "checkpoint_node_rules: [{set: {latent: {mode: full, blocks: [99]}}}]\n");
  const std::string p = one_problem(files({f}));
  EXPECT_EQ(p.rfind(f + ":1: checkpoint_node_rules[0].set.latent.blocks: block index out of range: 99", 0), 0u) << p;
}

// ---- malformed rules: one specific message each ----------------------------

TEST_F(ConfigTest, NodeRuleUnclosedBracketGlob) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - match: {hostname: \"jwb0[0-4*\"}\n    set: {embed: none}\n");
  EXPECT_EQ(one_problem(files({f})), f + ":2: checkpoint_node_rules[0].match.hostname 'jwb0[0-4*' is not a valid "
                                         "glob pattern: the '[' at position 5 is not closed by ']'");
  const auto g = write("b.yml", "checkpoint_node_rules:\n  - match:\n      hostname: 'gpu[[:digt:]]'\n"
                                "    set: {embed: none}\n");
  const std::string p = one_problem(files({g}));
  EXPECT_EQ(p.rfind(g + ":3: checkpoint_node_rules[0].match.hostname 'gpu[[:digt:]]' is not a valid glob pattern: "
                        "unknown character class '[:digt:]'", 0), 0u) << p;
  EXPECT_EQ(one_problem(sets({"checkpoint_node_rules=[{match: {hostname: 'x[:alpha:'}, set: {pred: none}}]"})),
            "--set 'checkpoint_node_rules=[{match: {hostname: 'x[:alpha:'}, set: {pred: none}}]': "
            "checkpoint_node_rules[0].match.hostname 'x[:alpha:' is not a valid glob pattern: the '[' at position 2 "
            "is not closed by ']'");
}

TEST_F(ConfigTest, NodeRuleUnknownMatchKeyWithSuggestion) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - match:\n      nodes: [1]\n      hostnme: jwb*\n"
                                "    set: {embed: none}\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":4: checkpoint_node_rules[0].match: unknown key 'hostnme' (did you mean 'hostname'?)");
  const auto g = write("b.yml", "checkpoint_node_rules: [{match: {device_memory_gib_mn: 4}, set: {embed: none}}]\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: checkpoint_node_rules[0].match: unknown key 'device_memory_gib_mn' "
                                         "(did you mean 'device_memory_gib_min'?)");
}

TEST_F(ConfigTest, NodeRuleUnknownSectionInSet) {
  const auto f = write("a.yml", "seed: 1\ncheckpoint_node_rules:\n  - set: {embed: none}\n  - match: {nodes: [0]}\n"
                                "    set:\n      ae_global: full\n      encoder: full\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":7: checkpoint_node_rules[1].set: unknown section 'encoder' (known: embed, ae_local, ae_adapter, "
                "ae_aggregation, ae_global, forecast, pred, latent)");
  const auto g = write("b.yml", "checkpoint_node_rules: [{set: {ae_globl: full}}]\n");
  EXPECT_EQ(one_problem(files({g})),
            g + ":1: checkpoint_node_rules[0].set: unknown section 'ae_globl' (did you mean 'ae_global'?)");
  const auto h = write("c.yml", "checkpoint_node_rules: [{set: {ae_aggregaton: full}}]\n");
  EXPECT_EQ(one_problem(files({h})),
            h + ":1: checkpoint_node_rules[0].set: unknown section 'ae_aggregaton' (did you mean 'ae_aggregation'?)");
}

TEST_F(ConfigTest, NodeRuleBadMode) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - set: {ae_adapter: some}\n");
  EXPECT_EQ(one_problem(files({f})), f + ":2: checkpoint_node_rules[0].set.ae_adapter must be one of "
                                         "none|full|selective|every_n, got 'some'");
  const auto g = write("b.yml", "checkpoint_node_rules:\n  - set:\n      pred:\n        mode: [full]\n");
  EXPECT_EQ(one_problem(files({g})), g + ":4: checkpoint_node_rules[0].set.pred.mode must be one of "
                                         "none|full|selective|every_n, got the list [full]");
}

TEST_F(ConfigTest, NodeRuleEveryNWithWrongMode) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - set:\n      embed:\n        mode: full\n        every_n: 2\n");
  EXPECT_EQ(one_problem(files({f})), f + ":5: checkpoint_node_rules[0].set.embed.every_n is only allowed with mode "
                                         "every_n (the mode is 'full')");
  const auto g = write("b.yml", "checkpoint_node_rules: [{set: {ae_global: every_n}}]\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: checkpoint_node_rules[0].set.ae_global is every_n, which needs "
                                         "checkpoint_node_rules[0].set.ae_global.every_n (an integer >= 1)");
  const auto h = write("c.yml", "checkpoint_node_rules: [{set: {forecast: {mode: every_n, every_n: 0}}}]\n");
  EXPECT_EQ(one_problem(files({h})),
            h + ":1: checkpoint_node_rules[0].set.forecast.every_n must be an integer >= 1, got '0'");
}

TEST_F(ConfigTest, NodeRuleBlockOutOfRange) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - set: {pred: full}\n  - set:\n      ae_global:\n"
                                "        mode: none\n        blocks: [1, 8]\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":6: checkpoint_node_rules[1].set.ae_global.blocks: block index out of range: 8 (the ae_global "
                "section has 8 block(s), ae_global_num_blocks; valid indices are 0..7)");
  const auto a = write("d.yml", "checkpoint_node_rules: [{set: {ae_adapter: {blocks: [2]}}}]\n");
  const std::string q = one_problem(files({a}));
  EXPECT_EQ(q.rfind(a + ":1: checkpoint_node_rules[0].set.ae_adapter.blocks: block index out of range: 2 (the "
                        "ae_adapter section has 2 block(s)", 0), 0u) << q;
  // The decoder: the fixture's stream has 2 layers.
  EXPECT_NE(one_problem(sets({"checkpoint_node_rules=[{set: {pred: {mode: none, blocks: [2]}}}]"}))
                .find("checkpoint_node_rules[0].set.pred.blocks: block index out of range: 2 (the pred section has 2 block(s)"),
            std::string::npos);
  const auto g = with_streams("b.yml", "checkpoint_node_rules: [{set: {embed: {mode: full, blocks: [3]}}}]\n");
  const std::string p = one_problem(files({g}));
  EXPECT_NE(p.find(g + ":2: checkpoint_node_rules[0].set.embed.blocks: block index out of range: 3 (the embed "
                       "section has 3 block(s)"), std::string::npos) << p;
  EXPECT_EQ(one_problem(sets({"checkpoint_node_rules=[{set: {pred: {blocks: [-1]}}}]"})),
            "--set 'checkpoint_node_rules=[{set: {pred: {blocks: [-1]}}}]': checkpoint_node_rules[0].set.pred.blocks "
            "must be a list of block indices (integers >= 0), got the list [-1]");
}

TEST_F(ConfigTest, NodeRuleNotAMap) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - set: {pred: full}\n  - full\n");
  EXPECT_EQ(one_problem(files({f})), f + ":3: checkpoint_node_rules[1] must be a map with the keys match, set, got 'full'");
  const auto g = write("b.yml", "checkpoint_node_rules: full\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: checkpoint_node_rules must be a list of rules (maps with the keys "
                                         "match, set), got 'full'");
}

TEST_F(ConfigTest, NodeRuleMissingOrEmptySet) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - match: {nodes: [1]}\n");
  EXPECT_EQ(one_problem(files({f})), f + ":2: checkpoint_node_rules[0] lacks the key 'set' (the sections to change: "
                                         "embed, ae_local, ae_adapter, ae_aggregation, ae_global, forecast, pred)");
  const auto g = write("b.yml", "checkpoint_node_rules:\n  - match: {nodes: [1]}\n    set: {}\n");
  EXPECT_EQ(one_problem(files({g})), g + ":3: checkpoint_node_rules[0].set must be a non-empty map of sections "
                                         "(embed, ae_local, ae_adapter, ae_aggregation, ae_global, forecast, pred), "
                                         "each a mode or {mode, every_n, blocks, pieces}, got the map {}");
}

TEST_F(ConfigTest, NodeRuleMinAboveMax) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - match:\n      device_memory_gib_min: 40\n"
                                "      device_memory_gib_max: 25.5\n    set: {embed: none}\n");
  EXPECT_EQ(one_problem(files({f})), f + ":3: checkpoint_node_rules[0].match.device_memory_gib_min (40) must be <= "
                                         "checkpoint_node_rules[0].match.device_memory_gib_max (25.5, set at " + f + ":4)");
}

TEST_F(ConfigTest, NodeRuleNegativeMemoryAndBadNodes) {
  const auto f = write("a.yml", "checkpoint_node_rules: [{match: {device_memory_gib_max: -1}, set: {embed: none}}]\n");
  EXPECT_EQ(one_problem(files({f})), f + ":1: checkpoint_node_rules[0].match.device_memory_gib_max must be a number "
                                         ">= 0 (GiB), got '-1'");
  const auto g = write("b.yml", "checkpoint_node_rules: [{match: {nodes: [0, -2]}, set: {embed: none}}]\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: checkpoint_node_rules[0].match.nodes must be a list of node indices "
                                         "(integers >= 0), got the list [0, -2]");
  const auto h = write("c.yml", "checkpoint_node_rules: [{match: {hostname: [a, b]}, set: {embed: none}}]\n");
  EXPECT_EQ(one_problem(files({h})), h + ":1: checkpoint_node_rules[0].match.hostname must be a hostname glob (a "
                                         "non-empty string), got the list [a, b]");
}

TEST_F(ConfigTest, NodeRuleUnknownKeys) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - set: {embed: none}\n    mtch: {nodes: [1]}\n");
  EXPECT_EQ(one_problem(files({f})), f + ":3: checkpoint_node_rules[0]: unknown key 'mtch' (did you mean 'match'?)");
  const auto g = write("b.yml", "checkpoint_node_rules:\n  - set:\n      ae_local: {mode: full, block: [1]}\n");
  EXPECT_EQ(one_problem(files({g})),
            g + ":3: checkpoint_node_rules[0].set.ae_local: unknown key 'block' (did you mean 'blocks'?)");
  const auto h = write("c.yml", "checkpoint_node_rules: [{match: full, set: {embed: none}}]\n");
  EXPECT_EQ(one_problem(files({h})), h + ":1: checkpoint_node_rules[0].match must be a map with the keys hostname, "
                                         "nodes, device_memory_gib_min, device_memory_gib_max, got 'full'");
}

TEST_F(ConfigTest, NodeRuleProblemsAreAllReported) {
  const auto f = write("a.yml", "checkpoint_node_rules:\n  - match: {hostname: 'a['}\n    set: {ae_global: bad}\n"
                                "  - 3\n  - set: {encoder: full}\n");
  try {
    load_config(files({f}));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::vector<std::string> expected = {
        f + ":2: checkpoint_node_rules[0].match.hostname 'a[' is not a valid glob pattern: the '[' at position 2 "
            "is not closed by ']'",
        f + ":3: checkpoint_node_rules[0].set.ae_global must be one of none|full|selective|every_n, got 'bad'",
        f + ":4: checkpoint_node_rules[1] must be a map with the keys match, set, got '3'",
        f + ":5: checkpoint_node_rules[2].set: unknown section 'encoder' (known: embed, ae_local, ae_adapter, "
            "ae_aggregation, ae_global, forecast, pred, latent)",
    };
    EXPECT_EQ(e.problems(), expected) << e.what();
  }
}

TEST_F(ConfigTest, BadBucketAndFaultValues) {
  const auto f = write("a.yml", "ddp_bucket_mb: 0\n");
  EXPECT_EQ(one_problem(files({f})), f + ":1: ddp_bucket_mb must be a number > 0, got '0'");
  EXPECT_EQ(one_problem(sets({"fault_injection.rank=-2"})),
            "--set 'fault_injection.rank=-2': fault_injection.rank must be an integer >= -1, got '-2'");
  const auto g = write("b.yml", "fault_injection:\n  step: 1.5\n");
  EXPECT_EQ(one_problem(files({g})), g + ":2: fault_injection.step must be an integer >= -1, got '1.5'");
  const auto h = write("c.yml", "fault_injection: {rnk: 1}\n");
  EXPECT_EQ(one_problem(files({h})), h + ":1: unknown key 'fault_injection.rnk' (did you mean 'fault_injection.rank'?)");
}
