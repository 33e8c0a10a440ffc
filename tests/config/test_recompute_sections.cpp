// The seven recomputation sections of the configuration: the defaults
// (upstream's PR #1168 family), WeatherGenerator's booleans in every
// spelling, the aliases, the structured form and which wins, and the legacy
// names (src/config/recompute_sections.cpp, recompute_keys.cpp).
#include <algorithm>

#include "config_fixture.h"
#include "wg/plan/recompute_plan.h"

using namespace wg;
using namespace wg::config_test;

namespace {

const std::vector<std::string> kSections = {"embed",     "ae_local", "ae_adapter", "ae_aggregation",
                                            "ae_global", "forecast", "pred"};

const SectionRecompute& section(const RecomputeConfig& r, const std::string& name) {
  const RecomputeSectionInfo* info = find_recompute_section(name);
  if (!info) throw std::invalid_argument("no section " + name);
  return r.*info->field;
}

// Recomputed with the defaults (upstream's PR #1168): the aggregation and
// forecast engines, and the decoder's blocks (not its input and head).
bool on_by_default(const PieceKey& p) {
  return p.section == "ae_aggregation" || p.section == "forecast" || (p.section == "pred" && p.in_a_block());
}

// The recomputed pieces of `c`'s plan, as key strings.
std::vector<std::string> recomputed(const Config& c) {
  const RecomputePlan p = resolve_plan(c);
  std::vector<std::string> out;
  for (size_t i = 0; i < p.size(); ++i)
    if (p.recomputed(i)) out.push_back(p.pieces()[i].str());
  return out;
}

// The pieces `want` selects, as key strings.
std::vector<std::string> expected(const Config& c, const std::function<bool(const PieceKey&)>& want) {
  std::vector<std::string> out;
  for (const auto& p : model_pieces(c))
    if (want(p)) out.push_back(p.str());
  return out;
}

bool contains_text(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

}  // namespace

// ---- the defaults ------------------------------------------------------------

TEST_F(ConfigTest, RecomputeDefaultsFollowUpstreamPr1168) {
  // Config{} and default_config.yml agree section by section ...
  const Config fresh;
  const Config loaded = load_config(files({}));
  for (const auto& name : kSections) {
    const SectionRecompute &a = section(fresh.gradient_checkpointing, name), &b = section(loaded.gradient_checkpointing, name);
    EXPECT_EQ(a.mode, b.mode) << name;
    EXPECT_EQ(a.every_n, b.every_n) << name;
    EXPECT_EQ(a.blocks, b.blocks) << name;
    EXPECT_FALSE(b.set) << name;
  }
  // ... on upstream's values: the five booleans off, aggregation and
  // forecast recomputed, the decoder blocks recomputed (every_n 1).
  const std::vector<RecomputeMode> modes = {RecomputeMode::None, RecomputeMode::None, RecomputeMode::None,
                                            RecomputeMode::Full, RecomputeMode::None, RecomputeMode::Full,
                                            RecomputeMode::EveryN};
  for (size_t i = 0; i < kSections.size(); ++i)
    EXPECT_EQ(section(fresh.gradient_checkpointing, kSections[i]).mode, modes[i]) << kSections[i];
  EXPECT_EQ(fresh.gradient_checkpointing.pred.every_n, 1);
  const std::string& text = default_config_text();
  for (const char* flag : {"embed_gradient_checkpoint_mode", "ae_local_blocks_grdient_checkpoint_mode",
                           "ae_adapter_grdient_checkpoint_mode", "assimilate_global_gradient_checkpoint_mode",
                           "pred_gradient_checkpoint_mode"})
    EXPECT_NE(text.find(std::string("\n") + flag + ": false"), std::string::npos) << flag;
  // The plan of the defaults, with a forecast engine.
  const Config f = load_config(files({}, {"forecast_policy=fixed", "fe_num_blocks=2"}));
  EXPECT_EQ(recomputed(f), expected(f, on_by_default));
  EXPECT_FALSE(recomputed(f).empty());
  const RecomputePlan p = resolve_plan(f);
  EXPECT_TRUE(p.get(*PieceKey::parse("pred.S1/block1.mlp")));
  EXPECT_FALSE(p.get(*PieceKey::parse("pred.S1/input")));
  EXPECT_FALSE(p.get(*PieceKey::parse("pred.S1/head")));
  EXPECT_TRUE(p.get(*PieceKey::parse("forecast/block1.attn")));
}

// ---- the recomputation sections ----------------------------------------------

TEST(RecomputeSections, TableSpellsUpstreamsBooleans) {
  EXPECT_EQ(recompute_section_names(), kSections);
  const std::vector<std::string> flags = {"embed_gradient_checkpoint_mode",
                                          "ae_local_blocks_grdient_checkpoint_mode",
                                          "ae_adapter_grdient_checkpoint_mode",
                                          "",
                                          "assimilate_global_gradient_checkpoint_mode",
                                          "",
                                          "pred_gradient_checkpoint_mode"};
  ASSERT_EQ(recompute_sections().size(), flags.size());
  for (size_t i = 0; i < flags.size(); ++i) {
    const RecomputeSectionInfo& s = recompute_sections()[i];
    EXPECT_EQ(s.flag, flags[i]) << s.name;
    EXPECT_EQ(s.per_stream, s.name == "embed" || s.name == "pred") << s.name;
    EXPECT_EQ(s.flag_on, RecomputeMode::Full) << s.name;
    EXPECT_EQ(s.flag_off, s.name == "pred" ? RecomputeMode::EveryN : RecomputeMode::None) << s.name;
    EXPECT_EQ(find_recompute_section(s.name), &s);
  }
  EXPECT_EQ(find_recompute_section("latent"), nullptr);  // a legacy name, not a section
  EXPECT_EQ(current_section_name("latent"), "ae_global");
  EXPECT_EQ(current_section_name("pred"), "pred");
  ASSERT_EQ(legacy_recompute_flags().size(), 1u);
  EXPECT_EQ(legacy_recompute_flags()[0].old_name, "ae_global_gradient_checkpoint_mode");
  EXPECT_EQ(legacy_recompute_flags()[0].new_name, "assimilate_global_gradient_checkpoint_mode");
  // every_section sets all seven
  const RecomputeConfig all = every_section(RecomputeMode::EveryN, 3);
  for (const auto& name : kSections) {
    EXPECT_TRUE(section(all, name).set) << name;
    EXPECT_EQ(section(all, name).mode, RecomputeMode::EveryN) << name;
    EXPECT_EQ(section(all, name).every_n, 3) << name;
  }
}

TEST_F(ConfigTest, EverySectionBooleanInEverySpellingFoldsIntoItsSection) {
  struct Spelling {
    std::string key, section;
    bool legacy;
  };
  const std::vector<Spelling> spellings = {
      {"embed_gradient_checkpoint_mode", "embed", false},
      {"ae_local_blocks_grdient_checkpoint_mode", "ae_local", false},
      {"ae_local_blocks_gradient_checkpoint_mode", "ae_local", false},
      {"ae_adapter_grdient_checkpoint_mode", "ae_adapter", false},
      {"ae_adapter_gradient_checkpoint_mode", "ae_adapter", false},
      {"assimilate_global_gradient_checkpoint_mode", "ae_global", false},
      {"ae_global_grdient_checkpoint_mode", "ae_global", false},
      {"ae_global_gradient_checkpoint_mode", "ae_global", true},
      {"pred_gradient_checkpoint_mode", "pred", false},
      {"pred_grdient_checkpoint_mode", "pred", false},
  };
  for (const auto& s : spellings) {
    for (const bool value : {true, false}) {
      SCOPED_TRACE(s.key + (value ? ": true" : ": false"));
      // A forecast engine, so that every section has pieces.
      const auto f = write("a.yml", "forecast_policy: fixed\nfe_num_blocks: 2\n" + s.key + (value ? ": true\n" : ": false\n"));
      Config c;
      const auto w = warnings_of([&] { c = load_config(files({f})); });
      const SectionRecompute& sc = section(c.gradient_checkpointing, s.section);
      EXPECT_FALSE(sc.set);
      EXPECT_EQ(sc.origin.str(), f + ":3");
      if (value)
        EXPECT_EQ(sc.mode, RecomputeMode::Full);
      else
        EXPECT_EQ(sc.mode, s.section == "pred" ? RecomputeMode::EveryN : RecomputeMode::None);
      // The plan: the section's pieces follow the boolean, every other one keeps its default.
      EXPECT_EQ(recomputed(c), expected(c, [&](const PieceKey& p) {
                  return (value && p.section == s.section) || on_by_default(p);
                }));
      if (s.legacy) {
        ASSERT_EQ(w.size(), 1u);
        EXPECT_EQ(w[0], f + ":3: ae_global_gradient_checkpoint_mode is this trainer's old name of WeatherGenerator's "
                            "assimilate_global_gradient_checkpoint_mode: please rename it");
      } else {
        EXPECT_TRUE(w.empty()) << w.front();
      }
    }
  }
}

TEST_F(ConfigTest, PredBooleanFalseKeepsTheDecoderBlocksRecomputed) {
  const auto f = with_streams("a.yml", "pred_gradient_checkpoint_mode: false\n");
  const Config c = load_config(files({f}));
  const RecomputePlan p = resolve_plan(c);
  for (const char* key : {"pred.S1/block0.cross", "pred.S1/block0.attn", "pred.S1/block0.mlp", "pred.S1/block1.cross",
                          "pred.S1/block1.attn", "pred.S1/block1.mlp"})
    EXPECT_TRUE(p.get(*PieceKey::parse(key))) << key;
  EXPECT_FALSE(p.get(*PieceKey::parse("pred.S1/input")));
  EXPECT_FALSE(p.get(*PieceKey::parse("pred.S1/head")));
  const RecomputePlan t = resolve_plan(load_config(files({f}, {"pred_gradient_checkpoint_mode=true"})));
  EXPECT_TRUE(t.get(*PieceKey::parse("pred.S1/input")));
  EXPECT_TRUE(t.get(*PieceKey::parse("pred.S1/head")));
  EXPECT_TRUE(t.get(*PieceKey::parse("pred.S1/block1.mlp")));
}

TEST_F(ConfigTest, EveryAliasIsCanonicalised) {
  const auto g = [&](const std::string& text) {
    return load_config(files({write("a.yml", text)})).gradient_checkpointing;
  };
  // Same value under two spellings in one file is fine.
  EXPECT_EQ(g("ae_local_blocks_grdient_checkpoint_mode: true\nae_local_blocks_gradient_checkpoint_mode: true\n")
                .ae_local.mode,
            RecomputeMode::Full);
  EXPECT_EQ(g("ae_global_gradient_checkpoint_mode: true\nassimilate_global_gradient_checkpoint_mode: true\n")
                .ae_global.mode,
            RecomputeMode::Full);
  // A later source overrides an earlier one, whatever the spelling.
  const auto a = write("b.yml", "assimilate_global_gradient_checkpoint_mode: true\nae_adapter_grdient_checkpoint_mode: true\n");
  EXPECT_EQ(load_config(files({a}, {"ae_global_grdient_checkpoint_mode=false"})).gradient_checkpointing.ae_global.mode,
            RecomputeMode::None);
  EXPECT_EQ(load_config(files({a}, {"ae_global_gradient_checkpoint_mode=false"})).gradient_checkpointing.ae_global.mode,
            RecomputeMode::None);
  EXPECT_EQ(load_config(files({a}, {"ae_adapter_gradient_checkpoint_mode=false"})).gradient_checkpointing.ae_adapter.mode,
            RecomputeMode::None);
  const auto b = write("c.yml", "pred_grdient_checkpoint_mode: true\n");
  EXPECT_EQ(load_config(files({b})).gradient_checkpointing.pred.mode, RecomputeMode::Full);
  EXPECT_EQ(load_config(files({b}, {"pred_gradient_checkpoint_mode=false"})).gradient_checkpointing.pred.mode,
            RecomputeMode::EveryN);
}

TEST_F(ConfigTest, LegacyAeGlobalBooleanWorksWithOneWarning) {
  const auto f = write("a.yml", "seed: 1\nae_global_gradient_checkpoint_mode: true\n");
  Config c;
  auto w = warnings_of([&] { c = load_config(files({f})); });
  EXPECT_EQ(c.gradient_checkpointing.ae_global.mode, RecomputeMode::Full);
  EXPECT_EQ(c.gradient_checkpointing.ae_global.origin.str(), f + ":2");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], f + ":2: ae_global_gradient_checkpoint_mode is this trainer's old name of WeatherGenerator's "
                      "assimilate_global_gradient_checkpoint_mode: please rename it");
  // On the command line too.
  w = warnings_of([&] { c = load_config(sets({"ae_global_gradient_checkpoint_mode=true"})); });
  EXPECT_EQ(c.gradient_checkpointing.ae_global.mode, RecomputeMode::Full);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("--set 'ae_global_gradient_checkpoint_mode=true': ae_global_gradient_checkpoint_mode is this "
                      "trainer's old name"),
            std::string::npos)
      << w[0];
  // The new name: no warning.
  EXPECT_TRUE(warnings_of([&] { load_config(sets({"assimilate_global_gradient_checkpoint_mode=true"})); }).empty());
}

TEST_F(ConfigTest, SectionsWithoutBooleanTakeOnlyTheStructuredForm) {
  // No boolean exists for them ...
  EXPECT_NE(one_problem(sets({"ae_aggregation_gradient_checkpoint_mode=false"}))
                .find("unknown key 'ae_aggregation_gradient_checkpoint_mode'"),
            std::string::npos);
  EXPECT_NE(one_problem(sets({"forecast_gradient_checkpoint_mode=false"})).find("unknown key 'forecast_gradient_checkpoint_mode'"),
            std::string::npos);
  // ... they default to full, and the structured form changes them.
  const Config c = load_config(sets({"forecast_policy=fixed", "fe_num_blocks=3",
                                     "gradient_checkpointing={ae_aggregation: none, forecast: {mode: every_n, every_n: 2}}"}));
  EXPECT_EQ(c.gradient_checkpointing.ae_aggregation.mode, RecomputeMode::None);
  EXPECT_TRUE(c.gradient_checkpointing.ae_aggregation.set);
  EXPECT_EQ(c.gradient_checkpointing.forecast.mode, RecomputeMode::EveryN);
  const RecomputePlan p = resolve_plan(c);
  EXPECT_FALSE(p.get(*PieceKey::parse("ae_aggregation/block0.attn")));
  EXPECT_TRUE(p.get(*PieceKey::parse("forecast/block0.attn")));
  EXPECT_FALSE(p.get(*PieceKey::parse("forecast/block1.mlp")));
  EXPECT_TRUE(p.get(*PieceKey::parse("forecast/block2.mlp")));
}

TEST_F(ConfigTest, StructuredFormEveryModeAndShorthand) {
  const auto f = write("a.yml",
                       "gradient_checkpointing:\n"
                       "  embed: {mode: selective, blocks: [0, 1]}\n"
                       "  ae_global:\n"
                       "    mode: every_n\n"
                       "    every_n: 3\n"
                       "  pred: full\n"
                       "  ae_local: selective\n"
                       "  ae_adapter: {mode: none, blocks: [1]}\n"
                       "  ae_aggregation: {mode: every_n, every_n: 2}\n"
                       "  forecast: none\n");
  const RecomputeConfig g = load_config(files({f})).gradient_checkpointing;
  EXPECT_TRUE(g.embed.set);
  EXPECT_EQ(g.embed.mode, RecomputeMode::Selective);
  EXPECT_EQ(g.embed.blocks, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.ae_global.mode, RecomputeMode::EveryN);
  EXPECT_EQ(g.ae_global.every_n, 3);
  EXPECT_EQ(g.ae_global.origin.str(), f + ":4");
  EXPECT_TRUE(g.pred.set);
  EXPECT_EQ(g.pred.mode, RecomputeMode::Full);
  EXPECT_EQ(g.pred.origin.str(), f + ":6");
  EXPECT_EQ(g.ae_local.mode, RecomputeMode::Selective);
  EXPECT_EQ(g.ae_adapter.mode, RecomputeMode::None);
  EXPECT_EQ(g.ae_adapter.blocks, std::vector<int>{1});
  EXPECT_EQ(g.ae_aggregation.mode, RecomputeMode::EveryN);
  EXPECT_EQ(g.ae_aggregation.every_n, 2);
  EXPECT_TRUE(g.forecast.set);
  EXPECT_EQ(g.forecast.mode, RecomputeMode::None);
  const RecomputeConfig n = load_config(sets({"gradient_checkpointing.ae_aggregation.mode=none",
                                               "gradient_checkpointing.ae_global={blocks: [7]}"}))
                                .gradient_checkpointing;
  EXPECT_TRUE(n.ae_aggregation.set);
  EXPECT_EQ(n.ae_aggregation.mode, RecomputeMode::None);  // overrides the section's default (full)
  EXPECT_EQ(n.ae_global.mode, RecomputeMode::None);
  EXPECT_EQ(n.ae_global.blocks, std::vector<int>{7});
  EXPECT_FALSE(n.pred.set);
  EXPECT_EQ(n.pred.mode, RecomputeMode::EveryN);  // the boolean's default still applies
  // A later source's map merges into an earlier shorthand's section.
  const RecomputeConfig m =
      load_config(files({f}, {"gradient_checkpointing.ae_global.every_n=2"})).gradient_checkpointing;
  EXPECT_EQ(m.ae_global.every_n, 2);
  EXPECT_EQ(m.ae_global.mode, RecomputeMode::EveryN);
}

// `pieces`: piece labels recomputed whole on top of the mode; the list is
// checked for its type when read and against the model's pieces when the
// plan is resolved, both errors naming the file and line.
TEST_F(ConfigTest, StructuredFormPieceList) {
  const auto f = write("a.yml",
                       "gradient_checkpointing:\n"
                       "  embed: {mode: selective, pieces: [block1.attn]}\n"
                       "  ae_global:\n"
                       "    mode: none\n"
                       "    pieces: [block0.mlp, block3.attn]\n");
  const Config c = load_config(files({f}));
  const RecomputeConfig& g = c.gradient_checkpointing;
  EXPECT_EQ(g.embed.pieces, std::vector<std::string>{"block1.attn"});
  EXPECT_EQ(g.embed.pieces_origin.str(), f + ":2");
  EXPECT_EQ(g.ae_global.pieces, (std::vector<std::string>{"block0.mlp", "block3.attn"}));
  EXPECT_EQ(g.ae_global.pieces_origin.str(), f + ":5");
  const RecomputePlan p = resolve_plan(c);
  const auto mode = [&p](const std::string& key) { return p.mode(*PieceKey::parse(key)); };
  EXPECT_EQ(mode("embed.S1/block1.attn"), PieceMode::Recompute);
  EXPECT_EQ(mode("embed.S1/block1.mlp"), PieceMode::Lean);
  EXPECT_EQ(mode("ae_global/block0.mlp"), PieceMode::Recompute);
  EXPECT_EQ(mode("ae_global/block0.attn"), PieceMode::Keep);
  EXPECT_EQ(mode("ae_global/block3.attn"), PieceMode::Recompute);
  EXPECT_EQ(load_config(sets({"gradient_checkpointing.pred.pieces=[head]"})).gradient_checkpointing.pred.pieces,
            std::vector<std::string>{"head"});

  EXPECT_EQ(one_problem(sets({"gradient_checkpointing.ae_local.pieces=block0.attn"})),
            "--set 'gradient_checkpointing.ae_local.pieces=block0.attn': gradient_checkpointing.ae_local.pieces must "
            "be a list of the section's piece labels (such as block1.attn, input), got 'block0.attn'");
  const auto g2 = write("b.yml", "gradient_checkpointing:\n  ae_global: {pieces: [block0.attention]}\n");
  const Config bad = load_config(files({g2}));  // read: a list of strings
  try {
    resolve_plan(bad);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(g2 + ":2: ae_global.pieces names 'block0.attention', which is not a piece of the ae_global "
                           "section (its pieces: block0.attn, block0.mlp, block1.attn,",
                      0),
              0u)
        << m;
  }
}

TEST_F(ConfigTest, StructuredFormBeatsBooleanWithOneWarning) {
  const auto f = write("a.yml", "pred_gradient_checkpoint_mode: true\ngradient_checkpointing: {pred: none, ae_global: full}\n");
  Config c;
  const auto w = warnings_of([&] { c = load_config(files({f})); });
  EXPECT_EQ(c.gradient_checkpointing.pred.mode, RecomputeMode::None);
  EXPECT_TRUE(c.gradient_checkpointing.pred.set);
  EXPECT_EQ(c.gradient_checkpointing.ae_global.mode, RecomputeMode::Full);
  EXPECT_EQ(c.gradient_checkpointing.embed.mode, RecomputeMode::None);  // default boolean still applies
  ASSERT_EQ(w.size(), 1u);  // ae_global's boolean comes from the defaults: no warning
  EXPECT_NE(w[0].find(f + ":1: pred_gradient_checkpoint_mode is overridden by gradient_checkpointing.pred"),
            std::string::npos) << w[0];
}

TEST_F(ConfigTest, StructuredFormBeatsEveryBooleanEitherWay) {
  for (const auto& sec : recompute_sections()) {
    if (sec.flag.empty()) continue;
    for (const bool value : {true, false}) {
      SCOPED_TRACE(sec.flag + (value ? ": true" : ": false"));
      // The boolean says one thing, the structured form the other.
      const std::string mode = value ? "none" : "selective";
      const auto f = write("a.yml", sec.flag + (value ? ": true\n" : ": false\n") + "gradient_checkpointing:\n  " +
                                        sec.name + ": " + mode + "\n");
      Config c;
      const auto w = warnings_of([&] { c = load_config(files({f})); });
      const SectionRecompute& sc = c.gradient_checkpointing.*sec.field;
      EXPECT_TRUE(sc.set);
      EXPECT_EQ(sc.mode, value ? RecomputeMode::None : RecomputeMode::Selective);
      EXPECT_EQ(sc.origin.str(), f + ":3");
      ASSERT_EQ(w.size(), 1u);
      EXPECT_EQ(w[0].rfind(f + ":1: " + sec.flag + " is overridden by gradient_checkpointing." + sec.name +
                               " (set at " + f + ":3): the structured form wins",
                           0),
                0u)
          << w[0];
      // The plan follows the structured form.
      // (selective: every block piece and an embed's input and read-out run lean)
      const RecomputePlan p = resolve_plan(c);
      for (size_t i = 0; i < p.size(); ++i) {
        const PieceKey& k = p.pieces()[i];
        const bool lean =
            k.in_a_block() || k.kind == PieceKind::Readout || (k.section == "embed" && k.kind == PieceKind::Input);
        if (k.section == sec.name) EXPECT_EQ(p.mode(i), !value && lean ? PieceMode::Lean : PieceMode::Keep) << k.str();
      }
    }
  }
}

TEST_F(ConfigTest, LegacyLatentSectionIsAeGlobalWithAWarning) {
  const auto f = write("a.yml", "gradient_checkpointing:\n  latent: {mode: every_n, every_n: 2, blocks: [1]}\n");
  Config c;
  auto w = warnings_of([&] { c = load_config(files({f})); });
  const SectionRecompute& g = c.gradient_checkpointing.ae_global;
  EXPECT_TRUE(g.set);
  EXPECT_EQ(g.mode, RecomputeMode::EveryN);
  EXPECT_EQ(g.every_n, 2);
  EXPECT_EQ(g.blocks, std::vector<int>{1});
  EXPECT_EQ(g.origin.str(), f + ":2");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], f + ":2: gradient_checkpointing.latent is the old name of gradient_checkpointing.ae_global: "
                      "please rename it");
  const RecomputePlan p = resolve_plan(c);
  std::vector<bool> attn;
  for (int b = 0; b < 8; ++b) attn.push_back(p.get(PieceKey::in_block("ae_global", "", b, PieceKind::Attention)));
  EXPECT_EQ(attn, (std::vector<bool>{true, true, true, false, true, false, true, false}));
  // The shorthand on the command line, and the legacy name beating the boolean.
  w = warnings_of([&] {
    c = load_config(sets({"assimilate_global_gradient_checkpoint_mode=true", "gradient_checkpointing.latent=none"}));
  });
  EXPECT_EQ(c.gradient_checkpointing.ae_global.mode, RecomputeMode::None);
  EXPECT_TRUE(c.gradient_checkpointing.ae_global.set);
  EXPECT_EQ(w.size(), 2u);
  EXPECT_TRUE(contains_text(w, "gradient_checkpointing.latent is the old name of gradient_checkpointing.ae_global"));
  EXPECT_TRUE(contains_text(w, "assimilate_global_gradient_checkpoint_mode is overridden by gradient_checkpointing.latent"));
}

// The legacy name's block indices are checked like ae_global's, when the
// configuration is loaded (with its file and line), not first when the plan
// is resolved.
TEST_F(ConfigTest, LegacyLatentBlockIndexOutOfRange) {
  const auto f = write("a.yml", "gradient_checkpointing:\n  latent: {mode: none, blocks: [1, 8]}\n");
  const std::string p = one_problem(files({f}));
  EXPECT_EQ(p.rfind(f + ":2: gradient_checkpointing.latent.blocks: block index out of range: 8", 0), 0u) << p;
}
