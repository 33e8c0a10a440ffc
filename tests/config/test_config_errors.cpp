// Configuration loader, bad inputs: each kind gives its own message naming
// the key, the file and the line.
#include "config_fixture.h"

using namespace wg;
using namespace wg::config_test;
namespace fs = std::filesystem;


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
            "(known keys under gradient_checkpointing: policy, memory_budget_gib, memory_margin_gib, embed, latent, pred)");
}

TEST_F(ConfigTest, BadRecomputeMode) {
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

TEST_F(ConfigTest, AnemoiStreamNeedsExactlyOneStoreAndSpatialTokens) {
  const std::string embed = "  embed: {net: transformer, num_tokens: 1, num_heads: 2, dim_embed: 16, num_blocks: 1}\n";
  const auto f = with_streams("a.yml", "", "ERA5:\n  type: anemoi\n  filenames: [a.zarr, b.zarr]\n  token_size: 8\n"
                                           "  tokenize_spacetime: true\n" + embed);
  try {
    load_config(files({f}));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string s = (dir / "streams/s.yml").string();
    ASSERT_EQ(e.problems().size(), 2u);
    EXPECT_EQ(e.problems()[0], s + ":3: stream 'ERA5': filenames must name exactly one anemoi Zarr store, got 2");
    EXPECT_EQ(e.problems()[1], s + ":5: stream 'ERA5': tokenize_spacetime: true is not supported for anemoi streams "
                                   "(tokens group token_size neighbouring cells of one time step)");
  }
  // One store, no synthetic block: fine (the store itself is opened later, by the data layer).
  const auto g = with_streams("b.yml", "", "ERA5:\n  type: anemoi\n  filenames: [a.zarr]\n  token_size: 8\n" + embed);
  EXPECT_EQ(load_config(files({g})).streams.at(0).type, "anemoi");
}

TEST_F(ConfigTest, BadDatesAndPeriods) {
  const auto f = with_streams("a.yml", "start_date: 2020-01-01\nend_date: 201913010000\nstep_hrs: 0\n");
  try {
    load_config(files({f}));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 3u);
    EXPECT_EQ(e.problems()[0], f + ":2: start_date must be a date written YYYYMMDDHHMM (e.g. 197901010000), got '2020-01-01'");
    EXPECT_EQ(e.problems()[1], f + ":3: end_date must be a date written YYYYMMDDHHMM (e.g. 197901010000), got '201913010000'");
    EXPECT_EQ(e.problems()[2], f + ":4: step_hrs must be an integer >= 1, got '0'");
  }
  const auto g = with_streams("b.yml", "start_date: 202001020000\nend_date: 202001010000\n");
  EXPECT_EQ(one_problem(files({g})), g + ":3: end_date (202001010000) is before start_date (202001020000, set at " + g + ":2)");
}

TEST_F(ConfigTest, DataPathIsRelativeToItsFileOrFromTheEnvironment) {
  with_streams("unused.yml", "");
  const auto f = write("sub/a.yml", "streams_directory: ../streams/\ndata_path: ../data\n");
  EXPECT_EQ(load_config(files({f})).data_path, (dir / "data").string());
  ::setenv("WG_DATA_PATH", "/srv/anemoi", 1);
  const auto g = with_streams("b.yml", "");
  EXPECT_EQ(load_config(files({g})).data_path, "/srv/anemoi");
  EXPECT_EQ(load_config(files({f})).data_path, (dir / "data").string()) << "the config's data_path wins";
  ::unsetenv("WG_DATA_PATH");
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

TEST_F(ConfigTest, AutoPlanKeys) {
  const auto f = write("a.yml", "gradient_checkpointing:\n  policy: automatic\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":2: gradient_checkpointing.policy must be one of manual|auto, got 'automatic'");
  EXPECT_EQ(one_problem(sets({"gradient_checkpointing.memory_budget_gib=-1"})),
            "--set 'gradient_checkpointing.memory_budget_gib=-1': gradient_checkpointing.memory_budget_gib must be a "
            "number >= 0, got '-1'");
  EXPECT_EQ(one_problem(sets({"oom_max_retries=x"})),
            "--set 'oom_max_retries=x': oom_max_retries must be an integer >= 0, got 'x'");
  const Config c = load_config(sets({"gradient_checkpointing.policy=auto", "gradient_checkpointing.memory_budget_gib=40",
                                     "cpu_memory_limit_gib=2.5"}));
  EXPECT_TRUE(c.auto_plan.enabled);
  EXPECT_EQ(c.auto_plan.memory_budget_gib, 40);
  EXPECT_EQ(c.auto_plan.cpu_memory_limit_gib, 2.5);
  EXPECT_EQ(c.auto_plan.oom_max_retries, 3);
  EXPECT_FALSE(load_config({}).auto_plan.enabled);
}

TEST_F(ConfigTest, LoaderNumWorkersNegative) {
  const auto f = write("a.yml", "loader_num_workers: -1\n");
  EXPECT_EQ(one_problem(files({f})), f + ":1: loader_num_workers must be an integer >= 0, got '-1'");
}

TEST_F(ConfigTest, LoaderPrefetchZero) {
  EXPECT_EQ(one_problem(sets({"loader_prefetch=0"})),
            "--set 'loader_prefetch=0': loader_prefetch must be an integer >= 1, got '0'");
}

namespace wg::config_test {

// A run id names one directory under run_root: `../x`, an absolute path, a
// nested path or bytes that are not plain ASCII letters, digits, '.', '_'
// and '-' are errors that name the key and where it was set.
TEST_F(ConfigTest, RunIdMustBeOneSafeDirectoryName) {
  for (const std::string& bad : std::vector<std::string>{"../x", "/tmp/elsewhere", "a/b", "..", ".", "-rf",
                                                         "caf\xc3\xa9", std::string(129, 'a'), "with space"}) {
    const std::string p = one_problem(sets({"run_id=\"" + bad + "\""}));
    EXPECT_EQ(p.rfind("--set 'run_id=", 0), 0u) << bad << ": " << p;
    EXPECT_NE(p.find(": run_id must be one directory name"), std::string::npos) << bad << ": " << p;
  }
  // Bytes that are not UTF-8: refused (by the YAML reader or by the rule), naming the key.
  EXPECT_NE(one_problem(sets({std::string("run_id=bad\xff")})).find("run_id"), std::string::npos);
  const auto f = write("r.yml", "run_id: ../../escape\n");
  EXPECT_NE(one_problem(files({f})).find(f + ":1: run_id must be one directory name"), std::string::npos);
  for (const std::string& good :
       std::vector<std::string>{"", "run-2024_01.a", "cli-tiny", "20260101-120000-ab12", std::string(128, 'z')})
    EXPECT_EQ(load_config(sets({"run_id=\"" + good + "\""})).run_id, good) << good;
}

}  // namespace wg::config_test
