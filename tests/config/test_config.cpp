// Configuration loader, valid inputs: overlay order, --set, aliases, the
// structured gradient-checkpointing form, the shipped config files and the
// resolved-config round trip.
#include "config_fixture.h"

using namespace wg;
using namespace wg::config_test;
namespace fs = std::filesystem;

// ---- valid configurations --------------------------------------------------

TEST_F(ConfigTest, DefaultConfigLoadsWithProductionValues) {
  const Config c = load_config({});
  EXPECT_EQ(c.ae_local_dim_embed, 1024);
  EXPECT_EQ(c.ae_global_dim_embed, 2048);
  EXPECT_EQ(c.ae_global_num_blocks, 8);
  EXPECT_EQ(c.ae_global_num_heads, 32);
  EXPECT_TRUE(c.with_mixed_precision);
  EXPECT_TRUE(c.masking_rate_sampling);
  EXPECT_EQ(c.batch_size_per_gpu, 1);
  EXPECT_DOUBLE_EQ(c.lr.lr_max, 5e-5);
  EXPECT_EQ(c.lr.lr_steps_warmup, 512);
  EXPECT_EQ(c.lr.lr_scaling_policy, "sqrt");
  EXPECT_EQ(c.nan_policy, NanPolicy::Error);
  EXPECT_EQ(c.train_log_freq.checkpoint, 250);
  ASSERT_EQ(c.loss_fcts.size(), 1u);
  EXPECT_EQ(c.loss_fcts[0].name, "mse");
  EXPECT_DOUBLE_EQ(c.loss_fcts[0].weight, 1.0);
  EXPECT_EQ(c.gradient_checkpointing.embed.mode, RecomputeMode::Full);
  EXPECT_FALSE(c.gradient_checkpointing.embed.set);
  EXPECT_EQ(c.gradient_checkpointing.embed.origin.source, "default_config.yml");
  EXPECT_GT(c.gradient_checkpointing.embed.origin.line, 0);
  EXPECT_EQ(c.gradient_checkpointing.latent.mode, RecomputeMode::None);
  EXPECT_EQ(c.gradient_checkpointing.pred.mode, RecomputeMode::None);
  EXPECT_EQ(c.streams_directory, (fs::path(kSrc) / "config/streams/era5_1deg/").lexically_normal().string());
  ASSERT_EQ(c.streams.size(), 1u);
  const StreamConfig& s = c.streams[0];
  EXPECT_EQ(s.name, "ERA5");
  EXPECT_EQ(s.type, "synthetic");
  EXPECT_EQ(s.token_size, 8);
  EXPECT_EQ(s.embed.num_heads, 8);
  EXPECT_EQ(s.embed.dim_embed, 256);
  EXPECT_EQ(s.embed.num_blocks, 2);
  EXPECT_EQ(s.synthetic.num_channels, 80);
  EXPECT_EQ(s.synthetic.grid_lat, 32);
  EXPECT_EQ(s.synthetic.grid_lon, 64);
  EXPECT_EQ(s.origin.line, 3);
}

TEST_F(ConfigTest, StructDefaultsAgreeWithDefaultConfigYml) {
  // One source of truth: Config{} holds default_config.yml's values.
  EXPECT_EQ(default_disagreements(default_config_text()), std::vector<std::string>{});
  // The check sees a default that changes in one place only.
  std::string text = default_config_text();
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"seed: 42", "seed: 43"},
           {"with_mixed_precision: true", "with_mixed_precision: false"},
           {"embed_gradient_checkpoint_mode: true", "embed_gradient_checkpoint_mode: false"}}) {
    ASSERT_NE(text.find(from), std::string::npos) << from;
    text.replace(text.find(from), from.size(), to);
  }
  EXPECT_EQ(default_disagreements(text),
            (std::vector<std::string>{"seed", "with_mixed_precision", "embed_gradient_checkpoint_mode"}));
}

TEST_F(ConfigTest, DefaultConfigNamesEveryKeyWithoutWarnings) {
  const auto w = warnings_of([] { load_config({}); });
  EXPECT_TRUE(w.empty());
  const std::string y = resolved_config_yaml({});
  for (const char* key : {"  policy: manual  # default_config.yml:", "run_id: \"\"", "num_threads: 0",
                          "loss_fcts: [[mse, 1.0]]", "  checkpoint: 250  # default_config.yml:"})
    EXPECT_NE(y.find(key), std::string::npos) << key << "\n" << y;
}

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
  const Config c = load_config(sets({"loss_fcts=[[mse,0.5],[mae,0.5]]", "train_log_freq.terminal=5",
                                     "train_log_freq={metrics: 7}", "device=cpu", "seed=7",
                                     "masking_rate_sampling=false"}));
  ASSERT_EQ(c.loss_fcts.size(), 2u);
  EXPECT_EQ(c.loss_fcts[1].name, "mae");
  EXPECT_DOUBLE_EQ(c.loss_fcts[1].weight, 0.5);
  EXPECT_EQ(c.train_log_freq.terminal, 5);
  EXPECT_EQ(c.train_log_freq.metrics, 7);
  EXPECT_EQ(c.train_log_freq.checkpoint, 250);
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_FALSE(c.masking_rate_sampling);
}

TEST_F(ConfigTest, EveryAliasIsCanonicalised) {
  const auto latent = [&](const std::string& text) {
    return load_config(files({write("a.yml", text)})).gradient_checkpointing;
  };
  EXPECT_EQ(latent("ae_global_grdient_checkpoint_mode: true\n").latent.mode, RecomputeMode::Full);
  EXPECT_EQ(latent("assimilate_global_gradient_checkpoint_mode: true\n").latent.mode, RecomputeMode::Full);
  EXPECT_EQ(latent("pred_grdient_checkpoint_mode: true\n").pred.mode, RecomputeMode::Full);
  EXPECT_EQ(latent("embed_gradient_checkpoint_mode: false\n").embed.mode, RecomputeMode::None);
  // Same value under two spellings in one file is fine.
  EXPECT_EQ(latent("ae_global_gradient_checkpoint_mode: true\nassimilate_global_gradient_checkpoint_mode: true\n")
                .latent.mode,
            RecomputeMode::Full);
  // A later source overrides an earlier one, whatever the spelling.
  const auto a = write("b.yml", "assimilate_global_gradient_checkpoint_mode: true\n");
  EXPECT_EQ(load_config(files({a}, {"ae_global_grdient_checkpoint_mode=false"})).gradient_checkpointing.latent.mode,
            RecomputeMode::None);
  EXPECT_EQ(load_config(files({a}, {"ae_global_gradient_checkpoint_mode=false"})).gradient_checkpointing.latent.mode,
            RecomputeMode::None);
}

TEST_F(ConfigTest, AbsentSectionBooleansAreAcceptedWithOneWarningEach) {
  const auto f = write("a.yml",
                       "ae_local_blocks_grdient_checkpoint_mode: true\nae_adapter_gradient_checkpoint_mode: false\n");
  const auto w = warnings_of([&] { load_config(files({f}, {"ae_adapter_grdient_checkpoint_mode=true"})); });
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find(f + ":1: ae_local_blocks_grdient_checkpoint_mode names WeatherGenerator's local"),
            std::string::npos) << w[0];
  EXPECT_NE(w[1].find("--set 'ae_adapter_grdient_checkpoint_mode=true': ae_adapter_grdient_checkpoint_mode"),
            std::string::npos) << w[1];
  EXPECT_NE(w[1].find("does not have"), std::string::npos);
  const auto bad = write("b.yml", "ae_adapter_gradient_checkpoint_mode: 3\n");
  EXPECT_EQ(one_problem(files({bad})),
            bad + ":1: ae_adapter_gradient_checkpoint_mode must be true or false, got '3'");
}

TEST_F(ConfigTest, StructuredFormEveryModeAndShorthand) {
  const auto f = write("a.yml",
                       "gradient_checkpointing:\n"
                       "  embed: {mode: selective, blocks: [0, 1]}\n"
                       "  latent:\n"
                       "    mode: every_n\n"
                       "    every_n: 3\n"
                       "  pred: full\n");
  const RecomputeConfig g = load_config(files({f})).gradient_checkpointing;
  EXPECT_TRUE(g.embed.set);
  EXPECT_EQ(g.embed.mode, RecomputeMode::Selective);
  EXPECT_EQ(g.embed.blocks, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.latent.mode, RecomputeMode::EveryN);
  EXPECT_EQ(g.latent.every_n, 3);
  EXPECT_EQ(g.latent.origin.str(), f + ":4");
  EXPECT_TRUE(g.pred.set);
  EXPECT_EQ(g.pred.mode, RecomputeMode::Full);
  EXPECT_EQ(g.pred.origin.str(), f + ":6");
  const RecomputeConfig n = load_config(sets({"gradient_checkpointing.embed.mode=none",
                                               "gradient_checkpointing.latent={blocks: [7]}"}))
                                 .gradient_checkpointing;
  EXPECT_TRUE(n.embed.set);
  EXPECT_EQ(n.embed.mode, RecomputeMode::None);  // overrides the default boolean (true)
  EXPECT_EQ(n.latent.mode, RecomputeMode::None);
  EXPECT_EQ(n.latent.blocks, std::vector<int>{7});
  EXPECT_FALSE(n.pred.set);
  // A later source's map merges into an earlier shorthand's section.
  const RecomputeConfig m = load_config(files({f}, {"gradient_checkpointing.latent.every_n=2"})).gradient_checkpointing;
  EXPECT_EQ(m.latent.every_n, 2);
  EXPECT_EQ(m.latent.mode, RecomputeMode::EveryN);
}

TEST_F(ConfigTest, StructuredFormBeatsBooleanWithOneWarning) {
  const auto f = write("a.yml", "pred_gradient_checkpoint_mode: true\ngradient_checkpointing: {pred: none, latent: full}\n");
  Config c;
  const auto w = warnings_of([&] { c = load_config(files({f})); });
  EXPECT_EQ(c.gradient_checkpointing.pred.mode, RecomputeMode::None);
  EXPECT_TRUE(c.gradient_checkpointing.pred.set);
  EXPECT_EQ(c.gradient_checkpointing.latent.mode, RecomputeMode::Full);
  EXPECT_EQ(c.gradient_checkpointing.embed.mode, RecomputeMode::Full);  // default boolean still applies
  ASSERT_EQ(w.size(), 1u);  // latent's boolean comes from the defaults: no warning
  EXPECT_NE(w[0].find(f + ":1: pred_gradient_checkpoint_mode is overridden by gradient_checkpointing.pred"),
            std::string::npos) << w[0];
}

TEST_F(ConfigTest, ShippedConfigFilesLoad) {
  const Config mixed = load_config(files({kSrc + "/config/mixed.yml"}));
  ASSERT_EQ(mixed.streams.size(), 3u);  // sorted by file name
  EXPECT_EQ(mixed.streams[0].name, "ERA5");
  EXPECT_EQ(mixed.streams[1].name, "Satellite");
  EXPECT_EQ(mixed.streams[1].synthetic.num_channels, 24);
  EXPECT_EQ(mixed.streams[1].token_size, 2);
  EXPECT_EQ(mixed.streams[2].name, "SurfaceObs");
  EXPECT_EQ(mixed.streams[2].synthetic.num_channels, 12);
  EXPECT_EQ(mixed.streams[2].synthetic.grid_lon, 32);

  const Config small = load_config(files({kSrc + "/config/cpu_small.yml"}));
  ASSERT_EQ(small.streams.size(), 1u);
  EXPECT_EQ(small.streams[0].synthetic.num_channels, 16);
  EXPECT_EQ(small.streams[0].embed.dim_embed, 64);
  EXPECT_EQ(small.ae_global_dim_embed, 128);
  EXPECT_EQ(small.samples_per_mini_epoch, 400);
  EXPECT_EQ(small.device, "cpu");
  EXPECT_FALSE(small.with_mixed_precision);
  EXPECT_EQ(small.train_log_freq.checkpoint, 1000);

  const Config tiny = load_config(files({kSrc + "/config/cpu_tiny.yml"}));
  ASSERT_EQ(tiny.streams.size(), 1u);
  EXPECT_EQ(tiny.streams[0].synthetic.num_channels, 5);
  EXPECT_EQ(tiny.streams[0].embed.num_blocks, 4);
  EXPECT_EQ(tiny.ae_global_dim_embed, 32);
  EXPECT_EQ(tiny.batch_size_per_gpu, 2);
  EXPECT_EQ(tiny.lr.lr_steps_cooldown, 5);
}

TEST_F(ConfigTest, ResolvedYamlLoadsBackToTheSameConfig) {
  const ConfigSources src = files({kSrc + "/config/cpu_tiny.yml"},
                                  {"gradient_checkpointing={latent: {mode: every_n, every_n: 2, blocks: [1]}, pred: full}",
                                   "loss_fcts=[[mse, 0.25], [mae, 0.75]]", "run_id=abc", "nan_policy=skip"});
  for (const ConfigSources& s : {src, ConfigSources{}}) {
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
  EXPECT_EQ(y.find("ae_global_gradient_checkpoint_mode"), std::string::npos) << y;  // overridden: left out
  EXPECT_NE(y.find("embed_gradient_checkpoint_mode: true  # default_config.yml:"), std::string::npos) << y;
  EXPECT_TRUE(warnings_of([&] {
                ConfigSources back;
                back.files = {write("resolved2.yml", y)};
                back.include_defaults = false;
                load_config(back);
              }).empty());
}

TEST(NearestKey, SuggestsOnlyCloseKeys) {
  const std::vector<std::string> known = {"batch_size_per_gpu", "lr_max", "lr_start"};
  EXPECT_EQ(nearest_key("bach_size_per_gpu", known), "batch_size_per_gpu");
  EXPECT_EQ(nearest_key("lr_mx", known), "lr_max");
  EXPECT_EQ(nearest_key("zzzzzz", known), "");
  EXPECT_EQ(nearest_key("x", {}), "");
}
