// Configuration loader, valid inputs: overlay order, --set, aliases, the
// seven recomputation sections (WeatherGenerator's booleans in every
// spelling, the structured form, the legacy names, the defaults), the model
// keys, the shipped config files and the resolved-config round trip.
#include <algorithm>

#include "config_fixture.h"
#include "wg/plan/recompute_plan.h"

using namespace wg;
using namespace wg::config_test;
namespace fs = std::filesystem;

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

// ---- the shipped defaults ----------------------------------------------------

TEST_F(ConfigTest, DefaultConfigLoadsWithProductionValues) {
  // The compiled-in default_config.yml with its own stream file (streams/era5_1deg/).
  const Config c = load_config({});
  EXPECT_EQ(c.healpix_level, 5);
  EXPECT_EQ(c.ae_local_dim_embed, 1024);
  EXPECT_EQ(c.ae_local_num_blocks, 2);
  EXPECT_EQ(c.ae_local_num_heads, 16);
  EXPECT_EQ(c.ae_adapter_num_heads, 16);
  EXPECT_EQ(c.ae_adapter_embed, 128);
  EXPECT_EQ(c.ae_aggregation_num_blocks, 2);
  EXPECT_EQ(c.ae_global_dim_embed, 2048);
  EXPECT_EQ(c.ae_global_num_blocks, 8);
  EXPECT_EQ(c.ae_global_num_heads, 32);
  EXPECT_EQ(c.decoder_type, "PerceiverIOCoordConditioning");
  EXPECT_TRUE(c.pred_self_attention);
  EXPECT_TRUE(c.pred_mlp_adaln);
  EXPECT_EQ(c.forecast_policy, "");
  EXPECT_EQ(c.forecast_steps, 0);
  EXPECT_EQ(c.fe_num_blocks, 0);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-4);
  EXPECT_DOUBLE_EQ(c.mlp_norm_eps, 1e-5);
  EXPECT_EQ(c.norm_type, "LayerNorm");
  EXPECT_TRUE(c.with_mixed_precision);
  EXPECT_TRUE(c.validate_with_ema);
  EXPECT_EQ(c.training_mode, "masking");
  EXPECT_TRUE(c.masking_rate_sampling);
  EXPECT_EQ(c.batch_size_per_gpu, 1);
  EXPECT_DOUBLE_EQ(c.lr.lr_max, 5e-5);
  EXPECT_EQ(c.lr.lr_steps_warmup, 512);
  EXPECT_EQ(c.lr.lr_scaling_policy, "sqrt");
  EXPECT_EQ(c.nan_policy, NanPolicy::Error);
  EXPECT_EQ(c.train_log_freq.checkpoint, 250);
  EXPECT_DOUBLE_EQ(c.training_loss.weight, 0.7);
  ASSERT_EQ(c.training_loss.loss_fcts.size(), 2u);
  EXPECT_EQ(c.training_loss.loss_fcts[0].name, "mse");
  EXPECT_DOUBLE_EQ(c.training_loss.loss_fcts[0].weight, 0.8);
  EXPECT_EQ(c.training_loss.loss_fcts[1].name, "mae");
  EXPECT_DOUBLE_EQ(c.training_loss.loss_fcts[1].weight, 0.2);
  ASSERT_EQ(c.validation_loss.loss_fcts.size(), 1u);
  EXPECT_EQ(c.validation_loss.loss_fcts[0].name, "mse");
  const RecomputeConfig& g = c.gradient_checkpointing;
  EXPECT_EQ(g.embed.mode, RecomputeMode::None);
  EXPECT_FALSE(g.embed.set);
  EXPECT_EQ(g.embed.origin.source, "default_config.yml");
  EXPECT_GT(g.embed.origin.line, 0);
  EXPECT_EQ(g.ae_local.mode, RecomputeMode::None);
  EXPECT_EQ(g.ae_adapter.mode, RecomputeMode::None);
  EXPECT_EQ(g.ae_aggregation.mode, RecomputeMode::Full);
  EXPECT_EQ(g.ae_global.mode, RecomputeMode::None);
  EXPECT_EQ(g.forecast.mode, RecomputeMode::Full);
  EXPECT_EQ(g.pred.mode, RecomputeMode::EveryN);
  EXPECT_EQ(g.pred.every_n, 1);
  EXPECT_EQ(g.pred.origin.source, "default_config.yml");
  EXPECT_EQ(c.streams_directory, (fs::path(kSrc) / "config/streams/era5_1deg").lexically_normal().string());
  ASSERT_EQ(c.streams.size(), 1u);
  const StreamConfig& s = c.streams[0];
  EXPECT_EQ(s.name, "ERA5");
  EXPECT_EQ(s.token_size, 8);
  EXPECT_EQ(s.embed.num_heads, 8);
  EXPECT_EQ(s.embed.dim_embed, 256);
  EXPECT_EQ(s.embed.num_blocks, 2);
  // WeatherGenerator's config/streams/era5_1deg/era5.yml
  EXPECT_EQ(s.embed_target_coords.dim_embed, 256);
  EXPECT_EQ(s.target_readout.num_layers, 2);
  EXPECT_EQ(s.target_readout.num_heads, 4);
  EXPECT_EQ(s.pred_head.ens_size, 1);
  EXPECT_EQ(s.pred_head.num_layers, 1);
}

TEST_F(ConfigTest, StructDefaultsAgreeWithDefaultConfigYml) {
  // One source of truth: Config{} holds default_config.yml's values.
  EXPECT_EQ(default_disagreements(default_config_text()), std::vector<std::string>{});
  // The check sees a default that changes in one place only, a boolean and
  // a section without one among them.
  std::string text = default_config_text();
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"seed: 42", "seed: 43"},
           {"ae_local_num_blocks: 2", "ae_local_num_blocks: 3"},
           {"with_mixed_precision: true", "with_mixed_precision: false"},
           {"loss_fcts: [[mse, 0.8], [mae, 0.2]]", "loss_fcts: [[mse, 1.0]]"},
           {"embed_gradient_checkpoint_mode: false", "embed_gradient_checkpoint_mode: true"},
           {"pred_gradient_checkpoint_mode: false", "pred_gradient_checkpoint_mode: true"},
           {"  policy: manual", "  ae_aggregation: none\n  policy: manual"}}) {
    ASSERT_NE(text.find(from), std::string::npos) << from;
    text.replace(text.find(from), from.size(), to);
  }
  EXPECT_EQ(default_disagreements(text),
            (std::vector<std::string>{"seed", "ae_local_num_blocks", "with_mixed_precision",
                                      "training_mode_config.losses.LossPhysical.loss_fcts",
                                      "embed_gradient_checkpoint_mode", "gradient_checkpointing.ae_aggregation",
                                      "pred_gradient_checkpoint_mode"}));
}

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

TEST_F(ConfigTest, DefaultConfigNamesEveryKeyWithoutWarnings) {
  const auto w = warnings_of([&] { load_config(files({})); });
  EXPECT_TRUE(w.empty()) << w.front();
  const std::string y = resolved_config_yaml(files({}));
  for (const char* key : {"  policy: manual  # default_config.yml:", "run_id: \"\"", "num_threads: 0",
                          "loss_fcts: [[mse, 0.8], [mae, 0.2]]", "  checkpoint: 250  # default_config.yml:",
                          "ae_local_blocks_grdient_checkpoint_mode: false  # default_config.yml:",
                          "assimilate_global_gradient_checkpoint_mode: false  # default_config.yml:",
                          "pred_gradient_checkpoint_mode: false  # default_config.yml:",
                          "healpix_level: 5  # default_config.yml:", "forecast_policy: ~", "fe_num_blocks: 0"})
    EXPECT_NE(y.find(key), std::string::npos) << key << "\n" << y;
}

// ---- sources and their order -----------------------------------------------

TEST_F(ConfigTest, FilesOverlayInOrderThenSets) {
  const auto a = write("a.yml", "batch_size_per_gpu: 2\nlr_max: 1.0e-3\ntrain_log_freq:\n  terminal: 3\n");
  const auto b = write("b.yml", "batch_size_per_gpu: 3\ntrain_log_freq: {metrics: 4}\n");
  Config c = load_config(files({a, b}));
  EXPECT_EQ(c.batch_size_per_gpu, 3);
  EXPECT_DOUBLE_EQ(c.lr.lr_max, 1e-3);
  EXPECT_EQ(c.train_log_freq.terminal, 3);
  EXPECT_EQ(c.train_log_freq.metrics, 4);
  EXPECT_EQ(c.train_log_freq.checkpoint, 250);
  c = load_config(files({b, a}, {"batch_size_per_gpu=5"}));
  EXPECT_EQ(c.batch_size_per_gpu, 5);
  const std::string y = resolved_config_yaml(files({a, b}, {"device=cpu"}));
  EXPECT_NE(y.find("batch_size_per_gpu: 3  # " + b + ":1"), std::string::npos) << y;
  EXPECT_NE(y.find("terminal: 3  # " + a + ":4"), std::string::npos) << y;
  EXPECT_NE(y.find("device: cpu  # --set 'device=cpu'"), std::string::npos) << y;
}

TEST_F(ConfigTest, SetParsesScalarsNestedKeysListsAndMaps) {
  const Config c = load_config(sets({"training_mode_config.losses.LossPhysical.loss_fcts=[[mse,0.5],[mae,0.5]]",
                                     "validation_mode_config={losses: {LossPhysical: {weight: 0.5}}}",
                                     "train_log_freq.terminal=5", "train_log_freq={metrics: 7}", "device=cpu",
                                     "seed=7", "masking_rate_sampling=false"}));
  ASSERT_EQ(c.training_loss.loss_fcts.size(), 2u);
  EXPECT_EQ(c.training_loss.loss_fcts[1].name, "mae");
  EXPECT_DOUBLE_EQ(c.training_loss.loss_fcts[1].weight, 0.5);
  EXPECT_DOUBLE_EQ(c.training_loss.weight, 0.7);  // the sibling keeps its default
  EXPECT_DOUBLE_EQ(c.validation_loss.weight, 0.5);
  ASSERT_EQ(c.validation_loss.loss_fcts.size(), 1u);  // merged, not replaced
  EXPECT_EQ(c.train_log_freq.terminal, 5);
  EXPECT_EQ(c.train_log_freq.metrics, 7);
  EXPECT_EQ(c.train_log_freq.checkpoint, 250);
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_FALSE(c.masking_rate_sampling);
}

TEST_F(ConfigTest, UpstreamModelKeysDecode) {
  const auto f = write("a.yml",
                       "healpix_level: 4\n"
                       "ae_local_num_queries: 2\n"
                       "ae_adapter_with_residual: false\n"
                       "ae_global_att_dense_rate: 0.5\n"
                       "ae_global_block_factor: 16\n"
                       "ae_aggregation_num_blocks: 3\n"
                       "pred_self_attention: false\n"
                       "pred_mlp_adaln: false\n"
                       "forecast_steps: 2\n"
                       "forecast_policy: fixed\n"
                       "fe_num_blocks: 4\n"
                       "norm_eps: 1.0e-6\n"
                       "mlp_norm_eps: 1.0e-3\n"
                       "validate_with_ema: false\n"
                       "ema_ramp_up_ratio: 0.2\n"
                       "training_mode: forecast\n"
                       "timestep_weight: [gamma_decay, 0.9]\n"
                       "masking_strategy: combination\n"
                       "masking_strategy_config: {strategies: [random, causal], probabilities: [0.5, 0.5], "
                       "hl_mask: 2, mode: global, same_strategy_per_batch: true}\n"
                       "sampling_rate_target: 0.5\n"
                       "shuffle: false\n"
                       "batch_size_validation_per_gpu: 3\n"
                       "lr_scaling_policy: const\n");
  const Config c = load_config(files({f}));
  EXPECT_EQ(c.healpix_level, 4);
  EXPECT_EQ(c.ae_local_num_queries, 2);
  EXPECT_FALSE(c.ae_adapter_with_residual);
  EXPECT_DOUBLE_EQ(c.ae_global_att_dense_rate, 0.5);
  EXPECT_EQ(c.ae_global_block_factor, 16);
  EXPECT_EQ(c.ae_aggregation_num_blocks, 3);
  EXPECT_FALSE(c.pred_self_attention);
  EXPECT_FALSE(c.pred_mlp_adaln);
  EXPECT_EQ(c.forecast_steps, 2);
  EXPECT_EQ(c.forecast_policy, "fixed");
  EXPECT_EQ(c.fe_num_blocks, 4);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.mlp_norm_eps, 1e-3);
  EXPECT_FALSE(c.validate_with_ema);
  EXPECT_DOUBLE_EQ(c.ema_ramp_up_ratio, 0.2);
  EXPECT_EQ(c.training_mode, "forecast");
  EXPECT_EQ(c.timestep_weight, "gamma_decay");
  EXPECT_DOUBLE_EQ(c.timestep_weight_param, 0.9);
  EXPECT_EQ(c.masking_strategy, "combination");
  EXPECT_EQ(c.masking_strategy_config.strategies, (std::vector<std::string>{"random", "causal"}));
  EXPECT_EQ(c.masking_strategy_config.probabilities, (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(c.masking_strategy_config.hl_mask, 2);
  EXPECT_EQ(c.masking_strategy_config.mode, "global");
  EXPECT_TRUE(c.masking_strategy_config.same_strategy_per_batch);
  EXPECT_DOUBLE_EQ(c.sampling_rate_target, 0.5);
  EXPECT_FALSE(c.shuffle);
  EXPECT_EQ(c.batch_size_validation_per_gpu, 3);
  EXPECT_EQ(c.lr.lr_scaling_policy, "const");
  // null forms
  const Config n = load_config(files({f}, {"forecast_policy=null", "forecast_steps=0", "training_mode=masking",
                                           "timestep_weight=null"}));
  EXPECT_EQ(n.forecast_policy, "");
  EXPECT_EQ(n.timestep_weight, "");
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

// ---- the shipped configuration files ----------------------------------------------

TEST_F(ConfigTest, ShippedCpuConfigFilesLoad) {
  const Config small = load_config(files({kSrc + "/config/cpu_small.yml"}));
  ASSERT_EQ(small.streams.size(), 1u);
  EXPECT_EQ(small.streams[0].name, "Small");
  EXPECT_EQ(small.streams[0].synthetic.num_channels, 16);
  EXPECT_EQ(small.streams[0].embed.dim_embed, 32);
  EXPECT_EQ(small.streams[0].target_readout.num_layers, 2);
  EXPECT_EQ(small.healpix_level, 2);
  EXPECT_EQ(small.ae_local_dim_embed, 64);
  EXPECT_EQ(small.ae_global_dim_embed, 128);
  EXPECT_EQ(small.ae_global_num_blocks, 4);
  EXPECT_EQ(small.samples_per_mini_epoch, 200);
  EXPECT_EQ(small.device, "cpu");
  EXPECT_FALSE(small.with_mixed_precision);
  EXPECT_EQ(small.train_log_freq.checkpoint, 1000);

  const Config tiny = load_config(files({kSrc + "/config/cpu_tiny.yml"}));
  ASSERT_EQ(tiny.streams.size(), 1u);
  EXPECT_EQ(tiny.streams[0].name, "Tiny");
  EXPECT_EQ(tiny.streams[0].synthetic.num_channels, 5);
  EXPECT_EQ(tiny.streams[0].embed.num_blocks, 2);
  EXPECT_EQ(tiny.streams[0].target_readout.num_layers, 1);
  EXPECT_EQ(tiny.healpix_level, 1);
  EXPECT_EQ(tiny.ae_local_num_blocks, 1);
  EXPECT_EQ(tiny.ae_aggregation_num_blocks, 1);
  EXPECT_EQ(tiny.ae_global_dim_embed, 32);
  EXPECT_EQ(tiny.batch_size_per_gpu, 2);
  EXPECT_EQ(tiny.lr.lr_steps_cooldown, 5);
  // Every section of the model is there.
  std::vector<std::string> sections;
  for (const auto& p : model_pieces(tiny))
    if (sections.empty() || sections.back() != p.section) sections.push_back(p.section);
  EXPECT_EQ(sections, (std::vector<std::string>{"embed", "ae_local", "ae_adapter", "ae_aggregation", "ae_global", "pred"}));

  const Config wide = load_config(files({kSrc + "/config/cpu_wide.yml"}));
  ASSERT_EQ(wide.streams.size(), 1u);
  EXPECT_EQ(wide.streams[0].name, "ERA5");
  EXPECT_EQ(wide.streams[0].synthetic.num_channels, 71);
  EXPECT_EQ(wide.streams[0].embed.dim_embed, 256);
  EXPECT_EQ(wide.streams[0].embed.num_heads, 8);
  EXPECT_EQ(wide.ae_local_dim_embed, 256);
  EXPECT_EQ(wide.ae_global_dim_embed, 512);
  EXPECT_GT(wide.embed_dropout_rate, 0.0);  // dropout as upstream's defaults

  const Config anemoi = load_config(files({kSrc + "/config/anemoi_fixture.yml"}));
  ASSERT_EQ(anemoi.streams.size(), 1u);
  EXPECT_EQ(anemoi.streams[0].type, "anemoi");
  EXPECT_EQ(anemoi.streams[0].filenames, std::vector<std::string>{"anemoi-fixture.zarr"});
  EXPECT_EQ(anemoi.streams[0].source_exclude, std::vector<std::string>{"tp"});
  EXPECT_EQ(anemoi.samples_per_validation, 16);
}

// config/mixed.yml is upstream's overlay with upstream's stream files
// (config/streams/era5_nppatms_synop/, unchanged); cpu_mixed.yml lays a
// CPU-sized model over the same streams.
// config/upstream_head.yml: every piece of every section recomputed, as
// upstream's HEAD (the defaults follow the PR #1168 family instead).
TEST_F(ConfigTest, UpstreamHeadOverlayRecomputesEverything) {
  Config c = load_config(files({kSrc + "/config/cpu_tiny.yml", kSrc + "/config/upstream_head.yml"}));
  c.forecast_policy = "fixed";  // the forecast engine too
  c.fe_num_blocks = 1;
  const RecomputePlan plan = resolve_plan(c);
  EXPECT_EQ(plan.pieces_recomputed(), plan.pieces_total()) << plan.summary();
  const RecomputePlan defaults = resolve_plan(load_config(files({kSrc + "/config/cpu_tiny.yml"})));
  EXPECT_LT(defaults.pieces_recomputed(), defaults.pieces_total());
}

TEST_F(ConfigTest, ShippedMixedConfigLoads) {
  const Config mixed = load_config(files({kSrc + "/config/mixed.yml"}));
  ASSERT_EQ(mixed.streams.size(), 3u);  // sorted by file name: era5, npp_atms, synop
  EXPECT_EQ(mixed.streams[0].name, "ERA5");
  EXPECT_EQ(mixed.streams[0].type, "anemoi");
  EXPECT_EQ(mixed.streams[0].filenames,
            std::vector<std::string>{"aifs-ea-an-oper-0001-mars-o96-1979-2023-6h-v8.zarr"});
  EXPECT_EQ(mixed.streams[0].token_size, 32);
  EXPECT_EQ(mixed.streams[1].name, "NPPATMS");
  EXPECT_EQ(mixed.streams[1].type, "obs");
  EXPECT_EQ(mixed.streams[1].token_size, 32);
  EXPECT_EQ(mixed.streams[1].target_readout.num_layers, 1);
  EXPECT_EQ(mixed.streams[2].name, "SurfaceCombined");
  EXPECT_EQ(mixed.streams[2].token_size, 64);
  EXPECT_EQ(mixed.streams[2].embed.dim_embed, 256);
  EXPECT_EQ(mixed.ae_global_dim_embed, 2048);  // upstream's size
  const Config cpu = load_config(files({kSrc + "/config/cpu_mixed.yml"}));
  ASSERT_EQ(cpu.streams.size(), 3u);
  EXPECT_EQ(cpu.streams[1].name, "NPPATMS");
  EXPECT_EQ(cpu.healpix_level, 2);
  EXPECT_EQ(cpu.ae_global_dim_embed, 128);
}

TEST_F(ConfigTest, ResolvedYamlLoadsBackToTheSameConfig) {
  const ConfigSources src = files(
      {kSrc + "/config/cpu_tiny.yml"},
      {"gradient_checkpointing={ae_global: {mode: every_n, every_n: 2, blocks: [1]}, pred: full, forecast: none}",
       "training_mode_config.losses.LossPhysical.loss_fcts=[[mse, 0.25], [mae, 0.75]]", "run_id=abc",
       "nan_policy=skip", "ae_local_blocks_gradient_checkpoint_mode=true", "pred_self_attention=false",
       "timestep_weight=[gamma_decay, 0.5]", "masking_strategy_config.hl_mask=1"});
  for (const ConfigSources& s : {src, files({})}) {
    const std::string y = resolved_config_yaml(s);
    ConfigSources back;
    back.files = {write("resolved.yml", y)};
    back.include_defaults = false;
    EXPECT_EQ(dump(load_config(back)), dump(load_config(s))) << y;
  }
  const std::string y = resolved_config_yaml(src);
  EXPECT_NE(y.find("# " + kSrc + "/config/streams/cpu_tiny/tiny.yml:2"), std::string::npos) << y;
  EXPECT_NE(y.find("# Tiny:\n#   type: synthetic\n"), std::string::npos) << y;
  EXPECT_NE(y.find("#     noise: 0.05\n"), std::string::npos) << y;
  // Booleans the structured form overrides are left out, under every spelling.
  EXPECT_EQ(y.find("assimilate_global_gradient_checkpoint_mode"), std::string::npos) << y;
  EXPECT_EQ(y.find("ae_global_gradient_checkpoint_mode"), std::string::npos) << y;
  EXPECT_EQ(y.find("pred_gradient_checkpoint_mode"), std::string::npos) << y;
  EXPECT_NE(y.find("embed_gradient_checkpoint_mode: false  # default_config.yml:"), std::string::npos) << y;
  EXPECT_NE(y.find("ae_local_blocks_grdient_checkpoint_mode: true  # --set"), std::string::npos) << y;
  // Reloaded, it names upstream's not-used keys (the file now gives them) and warns of nothing else.
  const auto w = warnings_of([&] {
    ConfigSources back;
    back.files = {write("resolved2.yml", y)};
    back.include_defaults = false;
    load_config(back);
  });
  ASSERT_EQ(w.size(), 1u) << w.back();
  EXPECT_EQ(w[0].rfind("17 of WeatherGenerator's keys are accepted and not used here", 0), 0u) << w[0];
}

TEST(NearestKey, SuggestsOnlyCloseKeys) {
  const std::vector<std::string> known = {"batch_size_per_gpu", "lr_max", "lr_start"};
  EXPECT_EQ(nearest_key("bach_size_per_gpu", known), "batch_size_per_gpu");
  EXPECT_EQ(nearest_key("lr_mx", known), "lr_max");
  EXPECT_EQ(nearest_key("zzzzzz", known), "");
  EXPECT_EQ(nearest_key("x", {}), "");
}
