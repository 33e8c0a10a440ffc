// WeatherGenerator's config files as they are (src/config/upstream_keys.cpp,
// upstream_json.cpp and the path rules of loader.cpp): its not-used keys,
// its ??? placeholders, its working-directory paths, renamed and nested
// stream directories, and the JSON it saves beside its weights.
#include <nlohmann/json.hpp>

#include "config_fixture.h"

namespace wg::config_test {
namespace {

// Runs `fn` with the working directory at `dir`.
template <class F>
auto in_directory(const fs::path& dir, F fn) {
  struct Restore {
    fs::path was = fs::current_path();
    ~Restore() { fs::current_path(was); }
  } restore;
  fs::current_path(dir);
  return fn();
}

bool has(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_F(ConfigTest, UpstreamsNotUsedKeysAreAcceptedAndListedOnce) {
  const auto f = write("up.yml", "compile_model: False\nwith_fsdp: True\nnn_module: \"te\"\ndesc: \"\"\n"
                                 "wgtags:\n  org: None\n  exp: None\n");
  std::vector<std::string> w;
  w = warnings_of([&] { load_config(files({f})); });
  ASSERT_EQ(w.size(), 1u) << w.back();
  EXPECT_EQ(w[0], "5 of WeatherGenerator's keys are accepted and not used here (marked 'not used' in the run's "
                  "config.yml; see docs/weathergenerator.md): compile_model, with_fsdp, nn_module, desc, wgtags");
  // Not given by the user: nothing to say (the built-in defaults carry every upstream key).
  EXPECT_TRUE(warnings_of([&] { load_config(files({})); }).empty());
}

TEST_F(ConfigTest, ANotUsedKeyAwayFromUpstreamsDefaultNamesWhatItWouldNeed) {
  const auto f = write("up.yml", "compile_model: true\nfreeze_modules: \".*ERA5\"\nwith_fsdp: false\n"
                                 "log_grad_norms: false\nwgtags: {org: ecmwf}\n");
  const auto w = warnings_of([&] { load_config(files({f})); });
  ASSERT_EQ(w.size(), 4u) << w.back();
  EXPECT_EQ(w[1], f + ":1: compile_model is 'true' (upstream's default: 'False') and not used here: torch.compile "
                      "has no counterpart in this C++ trainer");
  EXPECT_EQ(w[2], f + ":2: freeze_modules is '.*ERA5' (upstream's default: '') and not used here: freezing modules "
                      "is not implemented: every parameter trains");
  EXPECT_EQ(w[3], f + ":5: wgtags.org is 'ecmwf' (upstream's default: 'None') and not used here: MLflow is not used; "
                      "the tags are kept in config.yml only");
  // with_fsdp: false is what this trainer does anyway; false is upstream's False.
  EXPECT_FALSE(has(w, "with_fsdp is")) << w[0];
  EXPECT_FALSE(has(w, "log_grad_norms is")) << w[0];
}

TEST_F(ConfigTest, TyposOfUpstreamKeysAreErrorsWithTheRightHint) {
  EXPECT_EQ(one_problem(sets({"compile_modle=true"})),
            "--set 'compile_modle=true': unknown key 'compile_modle' (did you mean 'compile_model'?)");
  EXPECT_EQ(one_problem(sets({"ae_local_num_block=2"})),
            "--set 'ae_local_num_block=2': unknown key 'ae_local_num_block' (did you mean 'ae_local_num_blocks'?)");
  EXPECT_EQ(one_problem(sets({"latent_noise_gama=2"})),
            "--set 'latent_noise_gama=2': unknown key 'latent_noise_gama' (did you mean 'latent_noise_gamma'?)");
}

TEST_F(ConfigTest, UpstreamsPlaceholdersGenerateOrMustBeSet) {
  const auto f = write("up.yml", "run_id: ???\ndata_loader_rng_seed: ???\nseed: 7\n");
  const Config c = load_config(files({f}));
  EXPECT_EQ(c.run_id, "");  // generated at start
  EXPECT_FALSE(c.data_loader_rng_seed.has_value());
  EXPECT_EQ(c.data_seed(), 7u);
  const Config d = load_config(files({f}, {"data_loader_rng_seed=1234"}));
  EXPECT_EQ(d.data_seed(), 1234u);
  EXPECT_EQ(d.seed, 7u);
  EXPECT_EQ(one_problem(sets({"lr_max=???"})),
            "--set 'lr_max=???\': lr_max is ???, upstream's placeholder for a value that must be set: set it in a "
            "config file or with --set lr_max=...");
  EXPECT_EQ(one_problem(sets({"data_loader_rng_seed=-3"})),
            "--set 'data_loader_rng_seed=-3': data_loader_rng_seed must be an integer >= 0, or ??? (then seed is "
            "used), got '-3'");
}

TEST_F(ConfigTest, StreamsDirectoryOfUpstreamResolvesFromTheWorkingDirectory) {
  // A checkout: checkout/config/default.yml names ./config/streams/x/, which
  // is not beside the file (checkout/config/config/streams/x) but under the
  // working directory, as WeatherGenerator takes it.
  write("checkout/config/streams/x/s.yml", kStream);
  write("checkout/config/default.yml", "streams_directory: \"./config/streams/x/\"\n");
  ConfigSources s;
  s.files = {"config/default.yml"};
  const Config c = in_directory(dir / "checkout", [&] { return load_config(s); });
  EXPECT_EQ(c.streams_directory, (dir / "checkout/config/streams/x").string());
  ASSERT_EQ(c.streams.size(), 1u);
  // This project's own rule still holds where the path exists beside the file.
  write("checkout/config/mine/streams/s.yml", kStream);
  write("checkout/config/mine/run.yml", "streams_directory: streams/\n");
  s.files = {"config/mine/run.yml"};
  EXPECT_EQ(in_directory(dir / "checkout", [&] { return load_config(s); }).streams_directory,
            (dir / "checkout/config/mine/streams").string());
}

TEST_F(ConfigTest, RenamedAndNestedStreamDirectoriesAreFoundAsUpstreamFindsThem) {
  // streams_mixed is upstream's old name of era5_nppatms_synop; stream files
  // are found recursively, editor files (".x.yml", "#x.yml#") left out.
  write("streams/era5_nppatms_synop/a.yml", kStream);
  write("streams/era5_nppatms_synop/more/b.yml", std::string(kStream).replace(0, 2, "S2"));
  write("streams/era5_nppatms_synop/.hidden.yml", "not: [valid");
  write("streams/era5_nppatms_synop/#draft.yml", "not: [valid");
  write("streams/era5_nppatms_synop/empty.yml", "");
  const auto f = write("m.yml", "streams_directory: streams/streams_mixed/\n");
  Config c;
  const auto w = warnings_of([&] { c = load_config(files({f})); });
  ASSERT_EQ(c.streams.size(), 2u);
  EXPECT_EQ(c.streams[0].name, "S1");
  EXPECT_EQ(c.streams[1].name, "S2");
  EXPECT_EQ(c.streams_directory, (dir / "streams/era5_nppatms_synop").string());
  EXPECT_TRUE(has(w, "streams_mixed does not exist; using " + (dir / "streams/era5_nppatms_synop").string() +
                         ", its new name in WeatherGenerator"));
  EXPECT_TRUE(has(w, "empty.yml is empty: skipped"));
}

TEST_F(ConfigTest, ResolvedYamlMarksNotUsedKeys) {
  const std::string y = resolved_config_yaml(files({}));
  EXPECT_NE(y.find("\ncompile_model: False  # default_config.yml:"), std::string::npos) << y;
  EXPECT_NE(y.find("(not used)"), std::string::npos);
  for (const char* key : {"compile_model", "with_fsdp", "nn_module", "wgtags", "istep", "data_loader_rng_seed"}) {
    const auto at = y.find(std::string("\n") + key + ":");
    ASSERT_NE(at, std::string::npos) << key;
    const std::string line = y.substr(at + 1, y.find('\n', at + 1) - at - 1);
    if (std::string(key) == "data_loader_rng_seed" || std::string(key) == "wgtags")
      EXPECT_EQ(line.find("(not used)"), std::string::npos) << line;  // used / a map
    else
      EXPECT_NE(line.find("(not used)"), std::string::npos) << line;
  }
  EXPECT_NE(y.find("  org: None  # default_config.yml:"), std::string::npos);
}

TEST_F(ConfigTest, UpstreamJsonHoldsTheConfigAndTheStreamsAsUpstreamSavesThem) {
  const auto f = write("up.yml",
                       "desc: \"a run\"\nlr_max: 5e-5\nforecast_policy: null\nwgtags: {org: ecmwf, exp: \"no\"}\n"
                       "shuffle: off\nvalidate_with_ema: no\nwith_fsdp: On\n");
  const LoadedConfig loaded = load_run_config(files({f}));
  const auto j = nlohmann::json::parse(loaded.upstream_json);
  EXPECT_EQ(j.at("desc"), "a run");
  EXPECT_EQ(j.at("healpix_level"), 5);
  EXPECT_DOUBLE_EQ(j.at("lr_max").get<double>(), 5e-5);
  EXPECT_TRUE(j.at("forecast_policy").is_null());
  EXPECT_EQ(j.at("with_fsdp"), true);
  // YAML 1.1's other booleans are booleans to PyYAML too (upstream reads
  // the string "off" as true); a quoted one stays a string
  EXPECT_EQ(j.at("shuffle"), false);
  EXPECT_EQ(j.at("validate_with_ema"), false);
  EXPECT_EQ(j.at("wgtags").at("exp"), "no");
  EXPECT_EQ(j.at("wgtags").at("org"), "ecmwf");
  EXPECT_EQ(j.at("training_mode_config").at("losses").at("LossPhysical").at("loss_fcts"),
            nlohmann::json::parse(R"([["mse", 0.8], ["mae", 0.2]])"));
  ASSERT_EQ(j.at("streams").size(), 1u);
  const auto& s = j.at("streams")[0];
  EXPECT_EQ(s.at("name"), "S1");
  EXPECT_EQ(s.at("type"), "synthetic");
  EXPECT_EQ(s.at("embed").at("num_blocks"), 3);
}

TEST_F(ConfigTest, ASavedRunConfigLoadsWithItsStreams) {
  // The JSON a run saves beside its .chkpt (this trainer's, or upstream's
  // with its runtime and private-config keys), given as --config.
  const LoadedConfig first = load_run_config(files({write("a.yml", "healpix_level: 3\nseed: 9\nrun_id: old\n")}));
  auto j = nlohmann::json::parse(first.upstream_json);
  j["rank"] = 0;
  j["with_ddp"] = true;
  j["data_path_anemoi"] = "/p/anemoi";
  j["model_path"] = "/p/models";
  j["streams_directory"] = "./config/streams/nowhere/";  // the saved streams are used, not this
  // what upstream's data sampler writes into each stream before saving
  j["streams"][0]["train_source_channels"] = {"synthetic_0"};
  j["streams"][0]["val_target_channels"] = {"synthetic_0"};
  j["streams"][0]["target_channel_weights"] = {1.0};
  const auto saved = write("model_old_latest.json", j.dump());
  ConfigSources s;
  s.files = {saved};
  const Config c = load_config(s);
  EXPECT_EQ(c.healpix_level, 3);
  EXPECT_EQ(c.seed, 9u);
  EXPECT_EQ(c.run_id, "");  // a new run, as upstream's --from_run_id
  ASSERT_EQ(c.streams.size(), 1u);
  EXPECT_EQ(c.streams[0].name, "S1");
  EXPECT_EQ(c.streams[0].embed.num_blocks, 3);
  EXPECT_EQ(c.streams[0].origin.source, saved);
  // A streams_directory given after it wins.
  write("other/s2.yml", std::string(kStream).replace(0, 2, "S2"));
  s.overrides = {"streams_directory=" + (dir / "other").string()};
  const Config d = load_config(s);
  ASSERT_EQ(d.streams.size(), 1u);
  EXPECT_EQ(d.streams[0].name, "S2");
  // A broken list is one clear problem.
  j["streams"] = 5;
  s.files = {write("bad.json", j.dump())};
  s.overrides = {};
  EXPECT_EQ(one_problem(s), s.files[0] + ":1: streams must be a non-empty list of stream settings, got '5'");
}

// WeatherGenerator's names from before mini-epochs (its
// config/ifs_fesom_config.yml), which its load_merge_configs copies into the
// new ones; in a saved run configuration too.
TEST_F(ConfigTest, EpochNamesFromBeforeMiniEpochsSetTheMiniEpochKeys) {
  const Config c = load_config(files({write("old.yml", "samples_per_epoch: 64\nnum_epochs: 111\n")}));
  EXPECT_EQ(c.samples_per_mini_epoch, 64);
  EXPECT_EQ(c.num_mini_epochs, 111);
  const Config saved =
      load_config(files({write("model_x_latest.json", R"({"samples_per_epoch": 8, "num_epochs": 2})")}));
  EXPECT_EQ(saved.samples_per_mini_epoch, 8);
  EXPECT_EQ(saved.num_mini_epochs, 2);
  EXPECT_NE(one_problem(files({write("both.yml", "samples_per_epoch: 64\nsamples_per_mini_epoch: 32\n")}))
                .find("'samples_per_mini_epoch' and 'samples_per_epoch' (line 1) both set samples_per_mini_epoch"),
            std::string::npos);
}

}  // namespace wg::config_test
