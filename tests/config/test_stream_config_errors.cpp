// Configuration loader, bad stream files: the streams directory, each
// stream's keys and values, upstream's own stream files, and what the
// streams must agree on with the main configuration. Each problem names the
// stream, the key, the file and the line.
#include <nlohmann/json.hpp>

#include "config_fixture.h"

using namespace wg;
using namespace wg::config_test;

namespace {
// A stream entry named `name` with the decoder keys every stream needs.
std::string stream_entry(const std::string& name, const std::string& settings) {
  return name + ":\n" + settings +
         "  embed: {net: transformer, num_tokens: 1, num_heads: 2, dim_embed: 16, num_blocks: 1}\n"
         "  embed_target_coords: {dim_embed: 16}\n"
         "  target_readout: {num_layers: 1, num_heads: 2}\n"
         "  pred_head: {ens_size: 1, num_layers: 1}\n";
}
}  // namespace

TEST_F(ConfigTest, MissingStreamsDirectory) {
  const auto f = write("a.yml", "seed: 3\nstreams_directory: nowhere/\n");
  // Not beside the file: taken from the working directory, as WeatherGenerator does, and said so.
  EXPECT_EQ(one_problem(files({f})), f + ":2: streams_directory '" + (fs::current_path() / "nowhere").string() +
                                         "' does not exist or is not a directory (relative to the working "
                                         "directory as WeatherGenerator resolves it; not found relative to " +
                                         f + ")");
}

TEST_F(ConfigTest, EmptyStreamsDirectory) {
  fs::create_directories(dir / "empty");
  write("empty/readme.txt", "not a stream file");
  const std::string arg = "streams_directory=" + (dir / "empty").string();
  EXPECT_EQ(one_problem(sets({arg})), "--set '" + arg + "': streams_directory '" + (dir / "empty").string() +
                                          "' contains no stream files (*.yml, *.yaml)");
}

TEST_F(ConfigTest, FileBackedStreamsNeedAStore) {
  const auto f = with_streams("a.yml", "", stream_entry("ERA5", "  type: anemoi\n  token_size: 8\n"));
  const std::string s = (dir / "streams/s.yml").string();
  const std::string p = one_problem(files({f}));
  EXPECT_EQ(p.rfind(s + ":1: stream 'ERA5': filenames must name at least one store", 0), 0u) << p;
  const auto g = with_streams("b.yml", "", stream_entry("Obs", "  type: obs\n  filenames: []\n  token_size: 8\n"));
  const std::string q = one_problem(files({g}));
  EXPECT_EQ(q.rfind(s + ":1: stream 'Obs': filenames must name at least one store", 0), 0u) << q;
  // Several stores and space-time tokens, no synthetic block: fine (the stores are opened later, by the data layer).
  const auto h = with_streams("c.yml", "", stream_entry("ERA5", "  type: anemoi\n  filenames: [a.zarr, b.zarr]\n"
                                                                "  token_size: 8\n  tokenize_spacetime: true\n"));
  const StreamConfig e = load_config(files({h})).streams.at(0);
  EXPECT_EQ(e.type, "anemoi");
  EXPECT_EQ(e.filenames, (std::vector<std::string>{"a.zarr", "b.zarr"}));
  EXPECT_TRUE(e.tokenize_spacetime);
  const std::string bad = one_problem(files({with_streams("d.yml", "", stream_entry("X", "  type: grib\n  token_size: 8\n"))}));
  EXPECT_EQ(bad, s + ":2: stream 'X': type is 'grib', which needs WeatherGenerator's grib reader; this trainer "
                     "reads anemoi, obs and synthetic streams only");
}

// WeatherGenerator's own stream file (config/streams/era5_1deg/era5.yml, as
// upstream writes it: spaces before the colons, True, 1., quoted values).
TEST_F(ConfigTest, UpstreamStyleStreamFileLoads) {
  write("up/era5.yml",
        "# (C) Copyright 2024 WeatherGenerator contributors.\n"
        "\n"
        "ERA5 :\n"
        "  type : anemoi\n"
        "  filenames : ['/capstor/store/cscs/userlab/ch17/data/aifs-ea-an-oper-0001-mars-o96-1979-2023-6h-v8.zarr']\n"
        "  source_exclude : ['w_', 'skt', 'tcw', 'cp', 'tp']\n"
        "  target_exclude : ['w_', 'skt', 'tcw', 'cp', 'tp']\n"
        "  loss_weight : 1.\n"
        "  masking_rate : 0.6\n"
        "  masking_rate_none : 0.05\n"
        "  token_size : 8\n"
        "  tokenize_spacetime : True\n"
        "  max_num_targets: -1\n"
        "  embed : \n"
        "    net : transformer\n"
        "    num_tokens : 1\n"
        "    num_heads : 8\n"
        "    dim_embed : 256\n"
        "    num_blocks : 2\n"
        "  embed_target_coords :\n"
        "    net : linear\n"
        "    dim_embed : 256\n"
        "  target_readout :\n"
        "    type : 'obs_value'  # token or obs_value\n"
        "    num_layers : 2\n"
        "    num_heads : 4\n"
        "    # sampling_rate : 0.2\n"
        "  pred_head :\n"
        "    ens_size : 1\n"
        "    num_layers : 1\n");
  Config c;
  EXPECT_TRUE(warnings_of([&] { c = load_config(sets({"streams_directory=" + (dir / "up").string()})); }).empty());
  ASSERT_EQ(c.streams.size(), 1u);
  const StreamConfig& s = c.streams[0];
  EXPECT_EQ(s.name, "ERA5");
  EXPECT_EQ(s.origin.str(), (dir / "up/era5.yml").string() + ":3");
  EXPECT_EQ(s.type, "anemoi");
  ASSERT_EQ(s.filenames.size(), 1u);
  EXPECT_EQ(s.filenames[0], "/capstor/store/cscs/userlab/ch17/data/aifs-ea-an-oper-0001-mars-o96-1979-2023-6h-v8.zarr");
  EXPECT_EQ(s.source_exclude, (std::vector<std::string>{"w_", "skt", "tcw", "cp", "tp"}));
  EXPECT_EQ(s.target_exclude, s.source_exclude);
  EXPECT_DOUBLE_EQ(s.loss_weight, 1.0);
  EXPECT_DOUBLE_EQ(s.masking_rate, 0.6);
  EXPECT_DOUBLE_EQ(s.masking_rate_none, 0.05);
  EXPECT_EQ(s.token_size, 8);
  EXPECT_TRUE(s.tokenize_spacetime);
  EXPECT_EQ(s.max_num_targets, -1);
  EXPECT_EQ(s.embed.net, "transformer");
  EXPECT_EQ(s.embed.num_heads, 8);
  EXPECT_EQ(s.embed.dim_embed, 256);
  EXPECT_EQ(s.embed.num_blocks, 2);
  EXPECT_EQ(s.embed_target_coords.net, "linear");
  EXPECT_EQ(s.embed_target_coords.dim_embed, 256);
  EXPECT_EQ(s.target_readout.type, "obs_value");
  EXPECT_EQ(s.target_readout.num_layers, 2);
  EXPECT_EQ(s.target_readout.num_heads, 4);
  EXPECT_EQ(s.pred_head.ens_size, 1);
  EXPECT_EQ(s.pred_head.num_layers, 1);
  EXPECT_FALSE(s.diagnostic);
}

TEST_F(ConfigTest, UpstreamStreamKeysDecode) {
  std::string text = std::string(kStream) + "  diagnostic: true\n  sampling_rate_target: 0.25\n  max_num_targets: 1000\n"
                     "  location_weight: cosine_latitude\n  frequency: '12:00:00'\n"
                     "  base_datetime: '2000-01-01T00:00:00'\n  channel_weights: {t_850: 2.0, q_500: 0.5}\n"
                     "  pred_head: {ens_size: 4, num_layers: 2, final_activation: Softplus}\n";
  text.erase(text.find("  pred_head: {ens_size: 1, num_layers: 1}\n"), 42);
  const StreamConfig st = load_config(files({with_streams("b.yml", "", text)})).streams.at(0);
  EXPECT_TRUE(st.diagnostic);
  EXPECT_DOUBLE_EQ(st.sampling_rate_target, 0.25);
  EXPECT_EQ(st.max_num_targets, 1000);
  EXPECT_EQ(st.location_weight, "cosine_latitude");
  EXPECT_EQ(st.frequency, "12:00:00");
  EXPECT_EQ(st.base_datetime, "2000-01-01T00:00:00");
  EXPECT_EQ(st.channel_weights, (std::vector<std::pair<std::string, double>>{{"t_850", 2.0}, {"q_500", 0.5}}));
  EXPECT_EQ(st.pred_head.ens_size, 4);
  EXPECT_EQ(st.pred_head.num_layers, 2);
  EXPECT_EQ(st.pred_head.final_activation, "Softplus");
}

// Upstream's readers keep a channel when `any()` include entry is in its
// name: `source: []` keeps none (upstream's CAMS stream files write it),
// absent or null keeps every one.
TEST_F(ConfigTest, AnEmptyIncludeListIsNotAnAbsentOne) {
  const auto stream = [&](const std::string& extra) {
    return load_config(files({with_streams("b.yml", "", std::string(kStream) + extra)})).streams.at(0);
  };
  const StreamConfig absent = stream("");
  EXPECT_FALSE(absent.source.has_value());
  EXPECT_FALSE(absent.target.has_value());
  const StreamConfig null = stream("  source: ~\n  target: null\n");
  EXPECT_FALSE(null.source.has_value());
  EXPECT_FALSE(null.target.has_value());
  const StreamConfig empty = stream("  source: []\n  target: ['t_']\n");
  ASSERT_TRUE(empty.source.has_value());
  EXPECT_TRUE(empty.source->empty());
  EXPECT_EQ(empty.target, std::vector<std::string>{"t_"});
  EXPECT_EQ(one_problem(files({with_streams("c.yml", "", std::string(kStream) + "  source: t_\n")})),
            dir.string() + "/streams/s.yml:9: stream 'S1': source must be a list of strings or null, got 't_'");
}

// YAML merge keys, as PyYAML (under OmegaConf) expands them: a map's own
// keys win over merged ones (yaml-cpp 0.7 leaves '<<' as a key).
TEST_F(ConfigTest, YamlMergeKeysExpandAsPyYamlDoes) {
  const std::string streams =
      "S1: &s1\n"
      "  type: synthetic\n"
      "  token_size: 4\n"
      "  embed: &emb {net: transformer, num_tokens: 1, num_heads: 2, dim_embed: 16, num_blocks: 3}\n"
      "  embed_target_coords: {net: linear, dim_embed: 16}\n"
      "  target_readout: {type: obs_value, num_layers: 2, num_heads: 2}\n"
      "  pred_head: {ens_size: 1, num_layers: 1}\n"
      "  synthetic: {num_channels: 5, grid_lat: 4, grid_lon: 6}\n"
      "S2: &s2\n"
      "  token_size: 8\n"
      "  <<: *s1\n"
      "  embed: {<<: *emb, num_blocks: 1}\n"
      "S3:\n"
      "  <<: *s2\n"  // chained: S1's keys through S2's merge
      "  loss_weight: 0.5\n";
  const LoadedConfig loaded = load_run_config(files({with_streams("b.yml", "", streams)}));
  ASSERT_EQ(loaded.config.streams.size(), 3u);
  const StreamConfig& s3 = loaded.config.streams[2];
  EXPECT_EQ(s3.type, "synthetic");
  EXPECT_EQ(s3.token_size, 8);
  EXPECT_EQ(s3.embed.num_blocks, 1);
  EXPECT_EQ(s3.embed.num_heads, 2);
  EXPECT_DOUBLE_EQ(s3.loss_weight, 0.5);
  EXPECT_EQ(nlohmann::json::parse(loaded.upstream_json).at("streams")[2].at("synthetic").at("num_channels"), 5);
  const StreamConfig& s2 = loaded.config.streams[1];
  EXPECT_EQ(s2.name, "S2");
  EXPECT_EQ(s2.type, "synthetic");
  EXPECT_EQ(s2.token_size, 8);  // its own key, written before the merge: still wins
  EXPECT_EQ(s2.embed.num_blocks, 1);
  EXPECT_EQ(s2.embed.num_heads, 2);
  EXPECT_EQ(s2.embed.dim_embed, 16);
  const auto j = nlohmann::json::parse(loaded.upstream_json).at("streams")[1];
  EXPECT_FALSE(j.contains("<<"));
  EXPECT_EQ(j.at("token_size"), 8);
  EXPECT_EQ(j.at("embed").at("num_blocks"), 1);
  EXPECT_EQ(j.at("embed").at("num_heads"), 2);
  EXPECT_EQ(j.at("synthetic").at("grid_lon"), 6);
}

TEST_F(ConfigTest, StreamLackingTargetReadoutHeads) {
  std::string text = kStream;
  text.replace(text.find("num_layers: 2, num_heads: 2"), 27, "num_layers: 2");
  const auto f = with_streams("a.yml", "", text);
  EXPECT_EQ(one_problem(files({f})),
            (dir / "streams/s.yml").string() + ":1: stream 'S1': lacks the required key 'target_readout.num_heads'");
  // Each of the decoder's required keys.
  for (const std::string& gone : {"  embed_target_coords: {net: linear, dim_embed: 16}\n",
                                  "  pred_head: {ens_size: 1, num_layers: 1}\n"}) {
    std::string t = kStream;
    t.erase(t.find(gone), gone.size());
    const auto all = problems(files({with_streams("b.yml", "", t)}));
    EXPECT_FALSE(all.empty());
    for (const auto& p : all) EXPECT_NE(p.find(": stream 'S1': lacks the required key '"), std::string::npos) << p;
  }
}

TEST_F(ConfigTest, ChannelWeightsMustBeNonNegative) {
  const auto f = with_streams("a.yml", "", std::string(kStream) + "  channel_weights:\n    t_850: 2.0\n    q_500: -1\n");
  EXPECT_EQ(one_problem(files({f})), (dir / "streams/s.yml").string() +
                                         ":11: stream 'S1': channel_weights must map target channel names to weights "
                                         ">= 0, got q_500: -1");
  const auto g = with_streams("b.yml", "", std::string(kStream) + "  channel_weights: {t_850: heavy}\n");
  EXPECT_NE(one_problem(files({g})).find("channel_weights must map target channel names to weights >= 0, got t_850: heavy"),
            std::string::npos);
  const auto h = with_streams("c.yml", "", std::string(kStream) + "  channel_weights: {t_850: 0}\n");
  EXPECT_EQ(load_config(files({h})).streams.at(0).channel_weights,
            (std::vector<std::pair<std::string, double>>{{"t_850", 0.0}}));
}

// An empty map (or null) names no weights.
TEST_F(ConfigTest, EmptyChannelWeightsAreNoWeights) {
  for (const char* v : {"{}", "null"}) {
    const auto f = with_streams("a.yml", "", std::string(kStream) + "  channel_weights: " + v + "\n");
    EXPECT_TRUE(load_config(files({f})).streams.at(0).channel_weights.empty()) << v;
  }
}

TEST_F(ConfigTest, DecoderHeadsComeFromTheFirstStream) {
  // S1 (s.yml, first by file name) has 2 decoder heads; T2's own 3 heads do not count.
  write("streams/t.yml", "T2:\n  type: synthetic\n  token_size: 4\n"
                         "  embed: {net: transformer, num_tokens: 1, num_heads: 2, dim_embed: 16, num_blocks: 1}\n"
                         "  embed_target_coords: {net: linear, dim_embed: 9}\n"
                         "  target_readout: {type: obs_value, num_layers: 1, num_heads: 3}\n"
                         "  pred_head: {ens_size: 1, num_layers: 1}\n"
                         "  synthetic: {num_channels: 2, grid_lat: 4, grid_lon: 6}\n");
  EXPECT_EQ(one_problem(sets({})),
            (dir / "streams/t.yml").string() + ":1: stream 'T2': embed_target_coords.dim_embed (9) must be divisible "
            "by target_readout.num_heads of the first stream 'S1' (2): upstream takes the decoder's heads from the "
            "first stream");
}

TEST_F(ConfigTest, BadStreamKey) {
  std::string text = kStream;
  text.replace(text.find("token_size"), 10, "tokn_size");
  const auto f = with_streams("a.yml", "", text);
  const std::string s = (dir / "streams/s.yml").string();
  const std::vector<std::string> p = problems(files({f}));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], s + ":3: unknown key 'tokn_size' in stream 'S1' (did you mean 'token_size'?)");
  EXPECT_EQ(p[1], s + ":1: stream 'S1': lacks the required key 'token_size'");
}

TEST_F(ConfigTest, BadStreamValues) {
  std::string text = kStream;
  text.replace(text.find("dim_embed: 16"), 13, "dim_embed: 15");
  const auto f = with_streams("a.yml", "", text + "  masking_rate: 1.5\n  extra_key_from_wg: 1\n");
  const std::string s = (dir / "streams/s.yml").string();
  const std::vector<std::string> p = problems(files({f}));
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], s + ":10: unknown key 'extra_key_from_wg' in stream 'S1'");
  EXPECT_EQ(p[1], s + ":9: stream 'S1': masking_rate must be -1 (unset; never used, as upstream) or "
                      "a number in [0, 1], got '1.5'");
  EXPECT_EQ(p[2], s + ":4: stream 'S1': embed.dim_embed (15) must be divisible by embed.num_heads (2)");
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
