// Configuration loader, bad inputs: each kind gives its own message naming
// the key, the file and the line. Bad stream files: test_stream_config_errors.cpp.
#include "config_fixture.h"

using namespace wg;
using namespace wg::config_test;

// ---- malformed configurations: one specific message each -------------------

TEST_F(ConfigTest, MissingFile) {
  const std::string p = (dir / "nope.yml").string();
  EXPECT_EQ(one_problem(files({p})), "config file '" + p + "' does not exist");
}

TEST_F(ConfigTest, YamlSyntaxError) {
  const auto f = write("a.yml", "seed: 1\ntimestep_weight: [gamma_decay, 1.0\nbatch_size_per_gpu: 2\n");
  const std::string p = one_problem(files({f}));
  EXPECT_EQ(p.rfind(f + ":", 0), 0u) << p;
  EXPECT_NE(p.find("YAML syntax error: end of sequence flow not found"), std::string::npos) << p;
}

// PyYAML's safe_load refuses a second document; yaml-cpp's Load read the
// first and dropped the rest without a word.
TEST_F(ConfigTest, ASecondYamlDocumentIsAnError) {
  const auto f = write("a.yml", "seed: 1\n---\nseed: 2\n");
  EXPECT_EQ(one_problem(files({f})), f + ":3: a second YAML document (after '---'); a config file holds one");
  const auto g = write("b.yml", "---\nseed: 3\n");  // one document, explicitly started
  EXPECT_EQ(load_config(files({g})).seed, 3u);
  EXPECT_EQ(load_config(files({write("c.yml", "")})).seed, load_config(files({})).seed);  // empty: nothing set
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
  EXPECT_EQ(one_problem(files({f})), f + ":1: norm_type must be LayerNorm, got 'BatchNorm'");
  EXPECT_EQ(one_problem(sets({"lr_policy_decay=exp"})),
            "--set 'lr_policy_decay=exp': lr_policy_decay must be one of constant|linear|cosine|exponential|sqrt, got 'exp'");
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
  const auto g = write("b.yml", "masking_rate: 1.5\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: masking_rate must be a number in [0, 1], got '1.5'");
  EXPECT_EQ(load_config(sets({"masking_rate=0"})).masking_rate, 0.0);  // the closed interval
  EXPECT_EQ(one_problem(sets({"sampling_rate_target=0"})),
            "--set 'sampling_rate_target=0': sampling_rate_target must be a number in (0, 1], got '0'");
  EXPECT_EQ(one_problem(sets({"healpix_level=13"})),
            "--set 'healpix_level=13': healpix_level must be an integer in [0, 12], got '13'");
  EXPECT_EQ(one_problem(sets({"grad_clip=-0.5"})), "--set 'grad_clip=-0.5': grad_clip must be a number >= 0, got '-0.5'");
}

TEST_F(ConfigTest, DimNotDivisibleByHeads) {
  const auto f = write("a.yml", "ae_global_num_heads: 24\n");
  const std::string p = one_problem(files({f}));
  EXPECT_EQ(p.rfind("default_config.yml:", 0), 0u) << p;
  EXPECT_NE(p.find(": ae_global_dim_embed (2048) must be divisible by ae_global_num_heads (24, set at " + f + ":1)"),
            std::string::npos) << p;
  const std::string q = one_problem(sets({"ae_local_dim_embed=1000"}));
  EXPECT_EQ(q.rfind("--set 'ae_local_dim_embed=1000': ae_local_dim_embed (1000) must be divisible by "
                    "ae_local_num_heads (16, set at default_config.yml:", 0),
            0u) << q;
  // The global width feeds the aggregation and forecast engines too: one problem per engine.
  const auto g = write("b.yml", "ae_global_dim_embed: 100\n");
  const auto all = problems(files({g}));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_NE(all[0].find(g + ":1: ae_global_dim_embed (100) must be divisible by ae_global_num_heads (32"), std::string::npos) << all[0];
  EXPECT_NE(all[1].find(g + ":1: ae_global_dim_embed (100) must be divisible by ae_aggregation_num_heads (32"), std::string::npos) << all[1];
  EXPECT_NE(all[2].find(g + ":1: ae_global_dim_embed (100) must be divisible by fe_num_heads (16"), std::string::npos) << all[2];
}

TEST_F(ConfigTest, BadLossFunctions) {
  const auto f = write("a.yml", "training_mode_config:\n  losses:\n    LossPhysical:\n      loss_fcts: [[huber, 1.0]]\n");
  EXPECT_EQ(one_problem(files({f})), f + ":4: training_mode_config.losses.LossPhysical.loss_fcts must be a non-empty "
                                         "list of [name, weight] pairs with name mse|mae and weight >= 0, got the "
                                         "entry [huber, 1.0]");
  const std::string p = one_problem(sets({"validation_mode_config.losses.LossPhysical.loss_fcts=[]"}));
  EXPECT_NE(p.find("validation_mode_config.losses.LossPhysical.loss_fcts must be a non-empty list"), std::string::npos) << p;
  EXPECT_EQ(one_problem(sets({"training_mode_config.losses.LossPhysical.weight=-1"})),
            "--set 'training_mode_config.losses.LossPhysical.weight=-1': "
            "training_mode_config.losses.LossPhysical.weight must be a number >= 0, got '-1'");
}

TEST_F(ConfigTest, RemovedKeysAreUnknown) {
  // Top-level loss_fcts moved under training_mode_config; pred_mlp_hidden_factor is gone.
  EXPECT_EQ(one_problem(sets({"loss_fcts=[[mse, 1.0]]"})).rfind("--set 'loss_fcts=[[mse, 1.0]]': unknown key 'loss_fcts'", 0), 0u);
  const auto f = write("a.yml", "pred_mlp_hidden_factor: 2\n");
  EXPECT_EQ(one_problem(files({f})).rfind(f + ":1: unknown key 'pred_mlp_hidden_factor'", 0), 0u);
}

TEST_F(ConfigTest, OnlyKeysRejectTheirOtherValue) {
  const std::string why = " here (the other setting does not run upstream either; docs/upstream-differences.md), got ";
  for (const char* key : {"pred_adapter_kv", "ae_local_queries_per_cell", "pred_dyadic_dims",
                          "embed_centroids_local_coords"}) {
    const auto f = write("a.yml", std::string("seed: 1\n") + key + ": true\n");
    EXPECT_EQ(one_problem(files({f})), f + ":2: " + key + " is supported only as False" + why + "'true'");
    EXPECT_EQ(load_config(files({}, {std::string(key) + "=false"})).seed, 42u) << key;  // the one value loads
  }
  for (const char* key : {"embed_local_coords", "target_cell_local_prediction"}) {
    const auto f = write("a.yml", std::string(key) + ": false\n");
    EXPECT_EQ(one_problem(files({f})), f + ":1: " + key + " is supported only as True" + why + "'false'");
  }
  const auto n = write("n.yml", "norm_type: RMSNorm\n");
  EXPECT_EQ(one_problem(files({n})), n + ":1: norm_type is RMSNorm, which this trainer does not build yet (where "
                                         "upstream puts its weights is not specified); use LayerNorm");
  EXPECT_EQ(one_problem(sets({"decoder_type=PerceiverIO"})),
            "--set 'decoder_type=PerceiverIO': decoder_type is 'PerceiverIO', one of WeatherGenerator's other "
            "decoders, which this trainer does not build; use PerceiverIOCoordConditioning (upstream's default)");
  EXPECT_EQ(one_problem(sets({"decoder_type=Perceiver"})),
            "--set 'decoder_type=Perceiver': decoder_type must be PerceiverIOCoordConditioning, got 'Perceiver'");
  EXPECT_EQ(one_problem(sets({"latent_noise_kl_weight=0.1"})),
            "--set 'latent_noise_kl_weight=0.1': latent_noise_kl_weight must be a number in [0, 0], got '0.1'");
  EXPECT_EQ(one_problem(sets({"ae_aggregation_att_dense_rate=0.5"})),
            "--set 'ae_aggregation_att_dense_rate=0.5': ae_aggregation_att_dense_rate must be a number in [1, 1], "
            "got '0.5'");
  EXPECT_EQ(one_problem(sets({"forecast_policy=random"})),
            "--set 'forecast_policy=random': forecast_policy must be null, fixed or sequential (the random policies "
            "are not supported here), got 'random'");
}

TEST_F(ConfigTest, StreamOnlyValuesAreRejected) {
  std::string text = kStream;
  text.replace(text.find("net: transformer, num_tokens: 1"), 31, "net: linear, num_tokens: 2");
  text.replace(text.find("net: linear, dim_embed"), 11, "net: mlp");
  text.replace(text.find("type: obs_value"), 15, "type: token");
  const auto f = with_streams("a.yml", "", text + "  target_readout_x: 1\n");
  const std::string s = (dir / "streams/s.yml").string();
  const auto all = problems(files({f}));
  const std::vector<std::string> want = {
      s + ":9: unknown key 'target_readout_x' in stream 'S1' (did you mean 'target_readout'?)",
      s + ":4: stream 'S1': embed.net must be one of transformer, got 'linear'",
      s + ":4: stream 'S1': embed.num_tokens must be an integer in [1, 1], got '2'",
      s + ":5: stream 'S1': embed_target_coords.net must be one of linear, got 'mlp'",
      s + ":6: stream 'S1': target_readout.type must be one of obs_value, got 'token'",
  };
  EXPECT_EQ(all, want);
}

TEST_F(ConfigTest, LrScalingPolicyNoneIsGone) {
  EXPECT_EQ(one_problem(sets({"lr_scaling_policy=none"})),
            "--set 'lr_scaling_policy=none': lr_scaling_policy must be one of const|linear|sqrt, got 'none'");
  for (const char* v : {"const", "linear", "sqrt"})
    EXPECT_EQ(load_config(sets({std::string("lr_scaling_policy=") + v})).lr.lr_scaling_policy, v);
}

TEST_F(ConfigTest, ForecastStepsNeedAnEngineAndAPolicy) {
  const auto f = write("a.yml", "forecast_steps: 2\nforecast_policy: fixed\n");
  const std::string p = one_problem(files({f}));
  EXPECT_EQ(p.rfind(f + ":1: forecast_steps (2) > 0 needs a forecast engine: fe_num_blocks (set at default_config.yml:", 0),
            0u) << p;
  EXPECT_NE(p.find(") is 0"), std::string::npos) << p;
  const auto g = write("b.yml", "forecast_steps: 2\nfe_num_blocks: 2\n");
  const std::string q = one_problem(files({g}));
  EXPECT_EQ(q.rfind("default_config.yml:", 0), 0u) << q;
  EXPECT_NE(q.find(": forecast_policy is null but forecast_steps (set at " + g + ":1) is 2; set forecast_policy: fixed"),
            std::string::npos) << q;
  const std::string r = one_problem(sets({"training_mode=forecast"}));
  EXPECT_EQ(r.rfind("--set 'training_mode=forecast': training_mode forecast needs forecast_policy", 0), 0u) << r;
  const auto both = problems(files({write("c.yml", "forecast_steps: 1\n")}));
  EXPECT_EQ(both.size(), 2u);  // no engine and no policy
  const Config c = load_config(files({g}, {"forecast_policy=fixed", "training_mode=forecast"}));
  EXPECT_EQ(c.forecast_steps, 2);
  EXPECT_EQ(c.fe_num_blocks, 2);
}

TEST_F(ConfigTest, UnknownCheckpointSection) {
  const auto f = write("a.yml", "gradient_checkpointing:\n  ae_globl: full\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":2: unknown key 'gradient_checkpointing.ae_globl' (did you mean 'gradient_checkpointing.ae_global'?)");
  EXPECT_EQ(one_problem(sets({"gradient_checkpointing.encoder.mode=full"})),
            "--set 'gradient_checkpointing.encoder.mode=full': unknown key 'gradient_checkpointing.encoder' "
            "(known keys under gradient_checkpointing: policy, memory_budget_gib, memory_margin_gib, embed, ae_local, "
            "ae_adapter, ae_aggregation, ae_global, forecast, pred, latent)");
  const auto g = write("b.yml", "gradient_checkpointing:\n  forecast: {mode: full, blocs: [0]}\n");
  EXPECT_EQ(one_problem(files({g})), g + ":2: unknown key 'gradient_checkpointing.forecast.blocs' (did you mean "
                                         "'gradient_checkpointing.forecast.blocks'?)");
}

TEST_F(ConfigTest, BadRecomputeMode) {
  const auto f = write("a.yml", "gradient_checkpointing: {embed: {mode: some}}\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":1: gradient_checkpointing.embed.mode must be one of none|full|selective|every_n, got 'some'");
}

TEST_F(ConfigTest, BlockIndexOutOfRange) {
  const auto f = write("a.yml", "gradient_checkpointing:\n  ae_global: {mode: none, blocks: [1, 8]}\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":2: gradient_checkpointing.ae_global.blocks: block index out of range: 8 (the ae_global section has "
                "8 block(s), ae_global_num_blocks; valid indices are 0..7)");
  const auto g = with_streams("b.yml", "gradient_checkpointing: {embed: {blocks: [3]}}\n");
  const std::string p = one_problem(files({g}));
  EXPECT_NE(p.find(g + ":2: gradient_checkpointing.embed.blocks: block index out of range: 3 (the embed section "
                       "has 3 block(s)"), std::string::npos) << p;
  // The decoder's blocks: the deepest target_readout.num_layers (2 in the fixture's stream).
  EXPECT_NE(one_problem(sets({"gradient_checkpointing.pred.blocks=[2]"}))
                .find("the pred section has 2 block(s), the largest target_readout.num_layers of the streams"),
            std::string::npos);
  EXPECT_EQ(load_config(sets({"gradient_checkpointing.pred.blocks=[1]"})).gradient_checkpointing.pred.blocks,
            std::vector<int>{1});
  // The adapter has two blocks; the local, aggregation and forecast engines their key's count.
  EXPECT_NE(one_problem(sets({"gradient_checkpointing.ae_adapter.blocks=[2]"})).find("the ae_adapter section has 2 block(s)"),
            std::string::npos);
  EXPECT_NE(one_problem(sets({"gradient_checkpointing.ae_local.blocks=[2]"}))
                .find("the ae_local section has 2 block(s), ae_local_num_blocks"),
            std::string::npos);
  EXPECT_NE(one_problem(sets({"gradient_checkpointing.ae_aggregation.blocks=[5]"}))
                .find("the ae_aggregation section has 2 block(s), ae_aggregation_num_blocks"),
            std::string::npos);
  EXPECT_NE(one_problem(sets({"fe_num_blocks=2", "forecast_policy=fixed", "gradient_checkpointing.forecast.blocks=[2]"}))
                .find("the forecast section has 2 block(s), fe_num_blocks"),
            std::string::npos);
  EXPECT_EQ(one_problem(sets({"gradient_checkpointing.pred.blocks=[-1]"})),
            "--set 'gradient_checkpointing.pred.blocks=[-1]': gradient_checkpointing.pred.blocks must be a list of "
            "block indices (integers >= 0), got the list [-1]");
}

TEST_F(ConfigTest, EveryNWithWrongMode) {
  const auto f = write("a.yml", "gradient_checkpointing:\n  embed:\n    mode: full\n    every_n: 2\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":4: gradient_checkpointing.embed.every_n is only allowed with mode every_n (the mode is 'full')");
  const auto g = write("b.yml", "gradient_checkpointing: {ae_global: every_n}\n");
  EXPECT_EQ(one_problem(files({g})), g + ":1: gradient_checkpointing.ae_global is every_n, which needs "
                                         "gradient_checkpointing.ae_global.every_n (an integer >= 1)");
}

TEST_F(ConfigTest, ConflictingAliasesInOneFile) {
  const auto f = write("a.yml", "ae_global_gradient_checkpoint_mode: true\nassimilate_global_gradient_checkpoint_mode: false\n");
  EXPECT_EQ(one_problem(files({f})),
            f + ":2: 'assimilate_global_gradient_checkpoint_mode' and 'ae_global_gradient_checkpoint_mode' (line 1) "
                "both set assimilate_global_gradient_checkpoint_mode but with different values (false vs true)");
  const auto g = write("b.yml", "ae_local_blocks_gradient_checkpoint_mode: false\nseed: 1\n"
                                "ae_local_blocks_grdient_checkpoint_mode: true\n");
  EXPECT_EQ(one_problem(files({g})),
            g + ":3: 'ae_local_blocks_grdient_checkpoint_mode' and 'ae_local_blocks_gradient_checkpoint_mode' (line 1) "
                "both set ae_local_blocks_grdient_checkpoint_mode but with different values (true vs false)");
  const auto h = write("c.yml", "ae_adapter_gradient_checkpoint_mode: 3\n");
  // named as written, not by the canonical (typo) spelling
  EXPECT_EQ(one_problem(files({h})), h + ":1: ae_adapter_gradient_checkpoint_mode must be true or false, got '3'");
}

TEST_F(ConfigTest, BadDatesAndPeriods) {
  const auto f = with_streams("a.yml", "start_date: 2020-01-01\nend_date: 201913010000\nstep_hrs: 0\n");
  try {
    load_config(files({f}));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 3u);
    const std::string forms =
        " must be a date written YYYYMMDDHHMM (e.g. 197901010000), YYYYMMDDHHMMSS or "
        "YYYY-MM-DD[T ]HH:MM[:SS], got ";
    EXPECT_EQ(e.problems()[0], f + ":2: start_date" + forms + "'2020-01-01'");  // upstream needs a time too
    EXPECT_EQ(e.problems()[1], f + ":3: end_date" + forms + "'201913010000'");
    EXPECT_EQ(e.problems()[2], f + ":4: step_hrs must be an integer >= 1, got '0'");
  }
  const auto g = with_streams("b.yml", "start_date: 202001020000\nend_date: 202001010000\n");
  EXPECT_EQ(one_problem(files({g})), g + ":3: end_date (202001010000) is before start_date (202001020000, set at " + g + ":2)");
}

// The forms upstream's str_to_datetime64 takes; 12 digits read as written
// (upstream's strptime reads 201001011230 as 12:03, docs/upstream-differences.md).
TEST_F(ConfigTest, DatesInUpstreamsForms) {
  const auto f = with_streams("a.yml",
                              "start_date: 20200101063000\nend_date: '2020-02-01 12:00'\n"
                              "start_date_val: 2020-03-01T00:00:30\nend_date_val: 202003011230\n");
  const Config c = load_config(files({f}));
  EXPECT_EQ(c.start_date, 1577836800 + 6 * 3600 + 30 * 60);
  EXPECT_EQ(c.end_date, 1580515200 + 12 * 3600);
  EXPECT_EQ(c.start_date_val, 1583020800 + 30);
  EXPECT_EQ(c.end_date_val, 1583020800 + 12 * 3600 + 30 * 60);  // 12:30, not upstream's 12:03
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
        f + ":2: norm_type must be LayerNorm, got 'Batch'",
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
  EXPECT_FALSE(load_config(files({})).auto_plan.enabled);
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
