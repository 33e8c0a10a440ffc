// Tests of the configuration loader: overlay order, --set, aliases, the
// structured gradient-checkpointing form, the shipped config files, the
// resolved-config round trip, and the message of each kind of bad input.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "wg/config/loader.h"

namespace fs = std::filesystem;
using namespace wg;

namespace {

const std::string kSrc = WG_SOURCE_DIR;

// One valid stream with 3 embed blocks.
const char* kStream =
    "S1:\n"
    "  type: synthetic\n"
    "  token_size: 4\n"
    "  embed: {net: transformer, num_tokens: 1, num_heads: 2, dim_embed: 16, num_blocks: 3}\n"
    "  synthetic: {num_channels: 5, grid_lat: 4, grid_lon: 6}\n";

class ConfigTest : public ::testing::Test {
 protected:
  fs::path dir;

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() /
          ("wgcfg_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string write(const std::string& rel, const std::string& text) {
    const fs::path p = dir / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

  // A config file whose streams come from dir/streams/ (holding kStream).
  std::string with_streams(const std::string& rel, const std::string& text,
                           const std::string& stream_text = kStream) {
    write("streams/s.yml", stream_text);
    return write(rel, "streams_directory: streams/\n" + text);
  }

  // The single problem of loading `s`; fails the test unless there is exactly one.
  std::string one_problem(const ConfigSources& s) {
    try {
      load_config(s);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.problems().size(), 1u) << e.what();
      return e.problems().empty() ? "" : e.problems().front();
    }
    ADD_FAILURE() << "expected a ConfigError";
    return "";
  }
};

ConfigSources files(std::vector<std::string> f, std::vector<std::string> sets = {}) {
  ConfigSources s;
  s.files = std::move(f);
  s.overrides = std::move(sets);
  return s;
}

ConfigSources sets(std::vector<std::string> s) { return files({}, std::move(s)); }

std::vector<std::string> warnings_of(const std::function<void()>& fn) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(32);
  sink->set_pattern("%v");
  auto old = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  fn();
  spdlog::set_default_logger(old);
  return sink->last_formatted();
}

// Every field of a Config except origins, one per line.
std::string dump(const Config& c) {
  std::ostringstream o;
  o << c.run_id << "|" << c.run_root << "|" << c.seed << "|" << c.embed_orientation << "|"
    << c.embed_unembed_mode << "|" << c.embed_size_centroids << "|" << c.embed_dropout_rate << "|"
    << c.ae_local_dim_embed << "|" << c.ae_global_dim_embed << "|" << c.ae_global_num_blocks << "|"
    << c.ae_global_num_heads << "|" << c.ae_global_dropout_rate << "|" << c.ae_global_mlp_hidden_factor
    << "|" << c.pred_mlp_hidden_factor << "|" << c.norm_type << "|" << c.with_mixed_precision << "|"
    << c.attention_dtype << "|" << c.streams_directory << "|" << c.batch_size_per_gpu << "|"
    << c.masking_rate << "|" << c.masking_rate_sampling << "|" << c.num_mini_epochs << "|"
    << c.samples_per_mini_epoch << "\n";
  const auto& l = c.lr;
  o << l.lr_start << "|" << l.lr_max << "|" << l.lr_final_decay << "|" << l.lr_final << "|"
    << l.lr_steps_warmup << "|" << l.lr_steps_cooldown << "|" << l.lr_policy_warmup << "|"
    << l.lr_policy_decay << "|" << l.lr_policy_cooldown << "|" << l.lr_scaling_policy << "|"
    << c.grad_clip << "|" << c.weight_decay << "|" << static_cast<int>(c.nan_policy) << "|"
    << c.max_consecutive_nan_skips << "|" << c.device << "|" << c.num_threads << "|"
    << c.train_log_freq.terminal << "|" << c.train_log_freq.metrics << "|"
    << c.train_log_freq.checkpoint << "\n";
  for (const auto& t : c.loss_fcts) o << "loss " << t.name << " " << t.weight << "\n";
  for (const auto* s : {&c.gradient_checkpointing.embed, &c.gradient_checkpointing.latent,
                        &c.gradient_checkpointing.pred}) {
    o << "gc " << s->set << " " << static_cast<int>(s->mode) << " " << s->every_n;
    for (int b : s->blocks) o << " " << b;
    o << "\n";
  }
  for (const auto& s : c.streams) {
    o << "stream " << s.name << "|" << s.type << "|" << s.filenames.size() << "|" << s.loss_weight
      << "|" << s.masking_rate << "|" << s.token_size << "|" << s.tokenize_spacetime << "|"
      << s.embed.net << "|" << s.embed.num_tokens << "|" << s.embed.num_heads << "|"
      << s.embed.dim_embed << "|" << s.embed.num_blocks << "|" << s.synthetic.num_channels << "|"
      << s.synthetic.grid_lat << "|" << s.synthetic.grid_lon << "|" << s.synthetic.num_waves << "|"
      << s.synthetic.noise << "|" << s.synthetic.time_step_hours << "\n";
  }
  return o.str();
}

}  // namespace

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
  EXPECT_EQ(c.gradient_checkpointing.embed.mode, CheckpointMode::Full);
  EXPECT_FALSE(c.gradient_checkpointing.embed.set);
  EXPECT_EQ(c.gradient_checkpointing.embed.origin.source, "default_config.yml");
  EXPECT_GT(c.gradient_checkpointing.embed.origin.line, 0);
  EXPECT_EQ(c.gradient_checkpointing.latent.mode, CheckpointMode::None);
  EXPECT_EQ(c.gradient_checkpointing.pred.mode, CheckpointMode::None);
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

TEST_F(ConfigTest, DefaultConfigNamesEveryKeyWithoutWarnings) {
  const auto w = warnings_of([] { load_config({}); });
  EXPECT_TRUE(w.empty());
  const std::string y = resolved_config_yaml({});
  for (const char* key : {"gradient_checkpointing: {}", "run_id: \"\"", "num_threads: 0",
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
  EXPECT_EQ(latent("ae_global_grdient_checkpoint_mode: true\n").latent.mode, CheckpointMode::Full);
  EXPECT_EQ(latent("assimilate_global_gradient_checkpoint_mode: true\n").latent.mode, CheckpointMode::Full);
  EXPECT_EQ(latent("pred_grdient_checkpoint_mode: true\n").pred.mode, CheckpointMode::Full);
  EXPECT_EQ(latent("embed_gradient_checkpoint_mode: false\n").embed.mode, CheckpointMode::None);
  // Same value under two spellings in one file is fine.
  EXPECT_EQ(latent("ae_global_gradient_checkpoint_mode: true\nassimilate_global_gradient_checkpoint_mode: true\n")
                .latent.mode,
            CheckpointMode::Full);
  // A later source overrides an earlier one, whatever the spelling.
  const auto a = write("b.yml", "assimilate_global_gradient_checkpoint_mode: true\n");
  EXPECT_EQ(load_config(files({a}, {"ae_global_grdient_checkpoint_mode=false"})).gradient_checkpointing.latent.mode,
            CheckpointMode::None);
  EXPECT_EQ(load_config(files({a}, {"ae_global_gradient_checkpoint_mode=false"})).gradient_checkpointing.latent.mode,
            CheckpointMode::None);
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
  const CheckpointConfig g = load_config(files({f})).gradient_checkpointing;
  EXPECT_TRUE(g.embed.set);
  EXPECT_EQ(g.embed.mode, CheckpointMode::Selective);
  EXPECT_EQ(g.embed.blocks, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.latent.mode, CheckpointMode::EveryN);
  EXPECT_EQ(g.latent.every_n, 3);
  EXPECT_EQ(g.latent.origin.str(), f + ":4");
  EXPECT_TRUE(g.pred.set);
  EXPECT_EQ(g.pred.mode, CheckpointMode::Full);
  EXPECT_EQ(g.pred.origin.str(), f + ":6");
  const CheckpointConfig n = load_config(sets({"gradient_checkpointing.embed.mode=none",
                                               "gradient_checkpointing.latent={blocks: [7]}"}))
                                 .gradient_checkpointing;
  EXPECT_TRUE(n.embed.set);
  EXPECT_EQ(n.embed.mode, CheckpointMode::None);  // overrides the default boolean (true)
  EXPECT_EQ(n.latent.mode, CheckpointMode::None);
  EXPECT_EQ(n.latent.blocks, std::vector<int>{7});
  EXPECT_FALSE(n.pred.set);
  // A later source's map merges into an earlier shorthand's section.
  const CheckpointConfig m = load_config(files({f}, {"gradient_checkpointing.latent.every_n=2"})).gradient_checkpointing;
  EXPECT_EQ(m.latent.every_n, 2);
  EXPECT_EQ(m.latent.mode, CheckpointMode::EveryN);
}

TEST_F(ConfigTest, StructuredFormBeatsBooleanWithOneWarning) {
  const auto f = write("a.yml", "pred_gradient_checkpoint_mode: true\ngradient_checkpointing: {pred: none, latent: full}\n");
  Config c;
  const auto w = warnings_of([&] { c = load_config(files({f})); });
  EXPECT_EQ(c.gradient_checkpointing.pred.mode, CheckpointMode::None);
  EXPECT_TRUE(c.gradient_checkpointing.pred.set);
  EXPECT_EQ(c.gradient_checkpointing.latent.mode, CheckpointMode::Full);
  EXPECT_EQ(c.gradient_checkpointing.embed.mode, CheckpointMode::Full);  // default boolean still applies
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

// ---- malformed configurations: one specific message each -------------------

TEST_F(ConfigTest, MissingFile) {
  const std::string p = (dir / "nope.yml").string();
  EXPECT_EQ(one_problem(files({p})), "config file '" + p + "' does not exist");
}

TEST_F(ConfigTest, YamlSyntaxError) {
  const auto f = write("a.yml", "seed: 1\nloss_fcts: [[mse, 1.0]\nbatch_size_per_gpu: 2\n");
  const std::string p = one_problem(files({f}));
  EXPECT_EQ(p.rfind(f + ":", 0), 0u) << p;
  EXPECT_NE(p.find("YAML syntax error: end of sequence flow not found"), std::string::npos) << p;
}

TEST_F(ConfigTest, TopLevelNotAMap) {
  const auto f = write("a.yml", "- seed\n- 1\n");
  EXPECT_EQ(one_problem(files({f})), f + ":1: the top level must be a map of 'key: value' entries, got the list [seed, 1]");
}

TEST_F(ConfigTest, UnknownKeyWithSuggestion) {
  const auto f = write("a.yml", "seed: 1\n\nbach_size_per_gpu: 4\n");
  EXPECT_EQ(one_problem(files({f})), f + ":3: unknown key 'bach_size_per_gpu' (did you mean 'batch_size_per_gpu'?)");
}

TEST_F(ConfigTest, UnknownNestedKey) {
  const auto f = write("a.yml", "train_log_freq:\n  terminl: 5\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":2: unknown key 'train_log_freq.terminl' (did you mean 'train_log_freq.terminal'?)");
}

TEST_F(ConfigTest, MapExpectedButScalarGiven) {
  const auto f = write("a.yml", "train_log_freq: 5\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":1: train_log_freq must be a map with the keys terminal, metrics, checkpoint, got '5'");
}

TEST_F(ConfigTest, DuplicateKey) {
  const auto f = write("a.yml", "batch_size_per_gpu: 2\nseed: 1\nbatch_size_per_gpu: 3\n");
  EXPECT_EQ(one_problem(files({f})), f + ":3: duplicate key 'batch_size_per_gpu' (first set at line 1)");
}

TEST_F(ConfigTest, WrongIntegerType) {
  const auto f = write("a.yml", "seed: 1\nbatch_size_per_gpu: abc\n");
  EXPECT_EQ(one_problem(files({f})), f + ":2: batch_size_per_gpu must be an integer >= 1, got 'abc'");
  const auto g = write("b.yml", "num_mini_epochs: 2.5\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: num_mini_epochs must be an integer >= 1, got '2.5'");
  const auto h = write("c.yml", "seed: -1\n");
  EXPECT_EQ(one_problem(files({h})), h + ":1: seed must be an integer >= 0, got '-1'");
}

TEST_F(ConfigTest, WrongBoolean) {
  const auto f = write("a.yml", "with_mixed_precision: maybe\n");
  EXPECT_EQ(one_problem(files({f})), f + ":1: with_mixed_precision must be true or false, got 'maybe'");
}

TEST_F(ConfigTest, BadEnum) {
  const auto f = write("a.yml", "norm_type: BatchNorm\n");
  EXPECT_EQ(one_problem(files({f})), f + ":1: norm_type must be one of LayerNorm|RMSNorm, got 'BatchNorm'");
  EXPECT_EQ(one_problem(sets({"lr_policy_decay=exp"})),
            "--set 'lr_policy_decay=exp': lr_policy_decay must be one of constant|linear|cosine, got 'exp'");
}

TEST_F(ConfigTest, TokensOrientationIsNotSupported) {
  const auto f = write("a.yml", "embed_orientation: tokens\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":1: embed_orientation is 'tokens', WeatherGenerator's other orientation, which this trainer "
                "does not support; use 'channels'");
}

TEST_F(ConfigTest, OutOfRangeValues) {
  const auto f = write("a.yml", "embed_dropout_rate: 1.0\n");
  EXPECT_EQ(one_problem(files({f})), f + ":1: embed_dropout_rate must be a number in [0, 1), got '1.0'");
  const auto g = write("b.yml", "masking_rate: 0\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: masking_rate must be a number in (0, 1), got '0'");
  EXPECT_EQ(one_problem(sets({"grad_clip=-0.5"})), "--set 'grad_clip=-0.5': grad_clip must be a number >= 0, got '-0.5'");
}

TEST_F(ConfigTest, DimNotDivisibleByHeads) {
  const auto f = write("a.yml", "ae_global_dim_embed: 100\n");
  const std::string p = one_problem(files({f}));
  EXPECT_EQ(p.rfind(f + ":1: ae_global_dim_embed (100) must be divisible by ae_global_num_heads (32, set at "
                        "default_config.yml:", 0),
            0u) << p;
}

TEST_F(ConfigTest, BadLossFunctions) {
  const auto f = write("a.yml", "loss_fcts: [[huber, 1.0]]\n");
  EXPECT_EQ(one_problem(files({f})), f + ":1: loss_fcts must be a non-empty list of [name, weight] pairs with "
                                         "name mse|mae and weight >= 0, got the entry [huber, 1.0]");
  const std::string p = one_problem(sets({"loss_fcts=[]"}));
  EXPECT_NE(p.find("loss_fcts must be a non-empty list"), std::string::npos) << p;
}

TEST_F(ConfigTest, UnknownCheckpointSection) {
  const auto f = write("a.yml", "gradient_checkpointing:\n  latnet: full\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":2: unknown key 'gradient_checkpointing.latnet' (did you mean 'gradient_checkpointing.latent'?)");
  EXPECT_EQ(one_problem(sets({"gradient_checkpointing.encoder.mode=full"})),
            "--set 'gradient_checkpointing.encoder.mode=full': unknown key 'gradient_checkpointing.encoder' "
            "(known keys under gradient_checkpointing: embed, latent, pred)");
}

TEST_F(ConfigTest, BadCheckpointMode) {
  const auto f = write("a.yml", "gradient_checkpointing: {embed: {mode: some}}\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":1: gradient_checkpointing.embed.mode must be one of none|full|selective|every_n, got 'some'");
}

TEST_F(ConfigTest, BlockIndexOutOfRange) {
  const auto f = write("a.yml", "gradient_checkpointing:\n  latent: {mode: none, blocks: [1, 8]}\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":2: gradient_checkpointing.latent.blocks: block index out of range: 8 (the latent section has "
                "8 block(s), ae_global_num_blocks; valid indices are 0..7)");
  const auto g = with_streams("b.yml", "gradient_checkpointing: {embed: {blocks: [3]}}\n");
  const std::string p = one_problem(files({g}));
  EXPECT_NE(p.find(g + ":2: gradient_checkpointing.embed.blocks: block index out of range: 3 (the embed section "
                       "has 3 block(s)"), std::string::npos) << p;
  EXPECT_NE(one_problem(sets({"gradient_checkpointing.pred.blocks=[1]"})).find("the pred section has 1 block(s)"),
            std::string::npos);
  EXPECT_EQ(one_problem(sets({"gradient_checkpointing.pred.blocks=[-1]"})),
            "--set 'gradient_checkpointing.pred.blocks=[-1]': gradient_checkpointing.pred.blocks must be a list of "
            "block indices (integers >= 0), got the list [-1]");
}

TEST_F(ConfigTest, EveryNWithWrongMode) {
  const auto f = write("a.yml", "gradient_checkpointing:\n  embed:\n    mode: full\n    every_n: 2\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":4: gradient_checkpointing.embed.every_n is only allowed with mode every_n (the mode is 'full')");
  const auto g = write("b.yml", "gradient_checkpointing: {latent: every_n}\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: gradient_checkpointing.latent is every_n, which needs "
                                         "gradient_checkpointing.latent.every_n (an integer >= 1)");
}

TEST_F(ConfigTest, ConflictingAliasesInOneFile) {
  const auto f = write("a.yml", "ae_global_gradient_checkpoint_mode: true\nassimilate_global_gradient_checkpoint_mode: false\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":2: 'assimilate_global_gradient_checkpoint_mode' and 'ae_global_gradient_checkpoint_mode' (line 1) "
                "both set ae_global_gradient_checkpoint_mode but with different values (false vs true)");
}

TEST_F(ConfigTest, MissingStreamsDirectory) {
  const auto f = write("a.yml", "seed: 3\nstreams_directory: nowhere/\n");
  EXPECT_EQ(one_problem(files({f})), f + ":2: streams_directory '" + (dir / "nowhere/").string() +
                                         "' does not exist or is not a directory");
}

TEST_F(ConfigTest, EmptyStreamsDirectory) {
  fs::create_directories(dir / "empty");
  write("empty/readme.txt", "not a stream file");
  const std::string arg = "streams_directory=" + (dir / "empty").string();
  EXPECT_EQ(one_problem(sets({arg})), "--set '" + arg + "': streams_directory '" + (dir / "empty").string() +
                                          "' contains no stream files (*.yml, *.yaml)");
}

TEST_F(ConfigTest, AnemoiStreamIsNotSupportedYet) {
  const auto f = with_streams("a.yml", "", "ERA5:\n  type: anemoi\n  filenames: [era5.zarr]\n  token_size: 8\n"
                                           "  embed: {net: transformer, num_tokens: 1, num_heads: 2, dim_embed: 16, num_blocks: 1}\n");
  EXPECT_EQ(one_problem(files({f})), (dir / "streams/s.yml").string() +
                                         ":2: stream 'ERA5': type is 'anemoi', but anemoi Zarr streams are not "
                                         "supported yet; use type: synthetic");
}

TEST_F(ConfigTest, BadStreamKey) {
  std::string text = kStream;
  text.replace(text.find("token_size"), 10, "tokn_size");
  const auto f = with_streams("a.yml", "", text);
  const std::string s = (dir / "streams/s.yml").string();
  try {
    load_config(files({f}));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2u) << e.what();
    EXPECT_EQ(e.problems()[0], s + ":3: unknown key 'tokn_size' in stream 'S1' (did you mean 'token_size'?)");
    EXPECT_EQ(e.problems()[1], s + ":1: stream 'S1': lacks the required key 'token_size'");
  }
}

TEST_F(ConfigTest, BadStreamValues) {
  std::string text = kStream;
  text.replace(text.find("dim_embed: 16"), 13, "dim_embed: 15");
  const auto f = with_streams("a.yml", "", text + "  masking_rate: 1.5\n  extra_key_from_wg: 1\n"
                                                  "  target_readout: {num_layers: 2}\n");
  const std::string s = (dir / "streams/s.yml").string();
  try {
    load_config(files({f}));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 3u) << e.what();
    EXPECT_EQ(e.problems()[0], s + ":7: unknown key 'extra_key_from_wg' in stream 'S1'");
    EXPECT_EQ(e.problems()[1], s + ":6: stream 'S1': masking_rate must be -1 (use the global masking_rate) or "
                                   "a number in (0, 1), got '1.5'");
    EXPECT_EQ(e.problems()[2], s + ":4: stream 'S1': embed.dim_embed (15) must be divisible by embed.num_heads (2)");
  }
}

TEST_F(ConfigTest, DuplicateStreamNames) {
  write("streams/b.yml", kStream);
  const auto f = with_streams("a.yml", "");
  EXPECT_EQ(one_problem(files({f})), (dir / "streams/s.yml").string() + ":1: stream 'S1' is defined twice (first at " +
                                         (dir / "streams/b.yml").string() + ":1)");
}

TEST_F(ConfigTest, CentroidsMustFitTheEmbedding) {
  const auto f = with_streams("a.yml", "ae_local_dim_embed: 16\nembed_size_centroids: 16\n");
  EXPECT_EQ(one_problem(files({f})), f + ":3: embed_size_centroids (16) must be < embed.num_tokens * "
                                         "ae_local_dim_embed = 16 for stream 'S1' (" +
                                         (dir / "streams/s.yml").string() + ":1)");
}

TEST_F(ConfigTest, SetWithoutEquals) {
  EXPECT_EQ(one_problem(sets({"batch_size_per_gpu"})),
            "--set 'batch_size_per_gpu': expected dotted.key=value (no '=' found)");
}

TEST_F(ConfigTest, SetUnknownKey) {
  EXPECT_EQ(one_problem(sets({"train_log_freq.termnal=5"})),
            "--set 'train_log_freq.termnal=5': unknown key 'train_log_freq.termnal' (did you mean "
            "'train_log_freq.terminal'?)");
  const std::string p = one_problem(sets({"seed=[1"}));
  EXPECT_EQ(p.rfind("--set 'seed=[1': the value is not valid YAML: ", 0), 0u) << p;
}

TEST_F(ConfigTest, AllProblemsAreReportedAtOnce) {
  const auto f = write("a.yml", "bach_size_per_gpu: 4\nnorm_type: Batch\nnorm_type: RMSNorm\n");
  const std::string missing = (dir / "missing.yml").string();
  try {
    load_config(files({f, missing}, {"device=tpu", "seed"}));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::vector<std::string> expected = {
        f + ":3: duplicate key 'norm_type' (first set at line 2)",
        "config file '" + missing + "' does not exist",
        "--set 'seed': expected dotted.key=value (no '=' found)",
        f + ":1: unknown key 'bach_size_per_gpu' (did you mean 'batch_size_per_gpu'?)",
        f + ":2: norm_type must be one of LayerNorm|RMSNorm, got 'Batch'",
        "--set 'device=tpu': device must be one of auto|cpu|cuda, got 'tpu'",
    };
    ASSERT_EQ(e.problems().size(), expected.size()) << e.what();
    for (const auto& line : expected) {
      EXPECT_NE(std::find(e.problems().begin(), e.problems().end(), line), e.problems().end()) << line;
      EXPECT_NE(std::string(e.what()).find("\n" + line), std::string::npos) << line;
    }
    EXPECT_EQ(std::string(e.what()).rfind("invalid configuration (6 problems):", 0), 0u);
  }
}
