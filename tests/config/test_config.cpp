// Configuration loader, valid inputs: the shipped defaults, overlay order,
// --set, the model keys, the shipped config files and the resolved-config
// round trip (the recomputation sections: test_recompute_sections.cpp).
#include "config_fixture.h"
#include "wg/plan/recompute_plan.h"

using namespace wg;
using namespace wg::config_test;
namespace fs = std::filesystem;

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
  // The benchmark's plan overlay (bench/plans/): every piece lean but the
  // embed's block 1 attention, recomputed whole.
  const RecomputePlan plan =
      resolve_plan(load_config(files({kSrc + "/config/cpu_wide.yml", kSrc + "/bench/plans/selective_embed_attn1.yml"})));
  EXPECT_EQ(plan.pieces_recomputed(), 1);
  EXPECT_TRUE(plan.get(*PieceKey::parse("embed.ERA5/block1.attn")));
  EXPECT_EQ(plan.pieces_lean() + 1 + 2, plan.pieces_total());  // kept: the decoder's input and head

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
