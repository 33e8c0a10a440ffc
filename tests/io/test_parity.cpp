// Parity with the PyTorch twin (tests/reference/twin.py): the embed
// transformer alone, the whole model (loss, predictions, every gradient),
// recomputation against torch.utils.checkpoint(use_reentrant=False), and an
// exact weights round trip C++ -> file -> PyTorch -> file -> C++.
//
// Each test writes its inputs into a fresh temporary directory, runs the twin
// with Debian's Python (/usr/bin/python3), and compares the twin's output
// file. Float32, eval mode (dropout off), fixed seeds. Tolerance per tensor:
// max|a - b| / max(max|b|, 1e-12) <= 1e-5.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "wg/config/loader.h"
#include "wg/data/dataset.h"
#include "wg/io/safetensors.h"
#include "wg/io/weights.h"
#include "wg/config/recompute_sections.h"
#include "wg/plan/recompute_plan.h"
#include "wg/model/embed_transformer.h"
#include "wg/model/weather_model.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/loss.h"

namespace wg {
namespace {

namespace fs = std::filesystem;

constexpr double kTol = 1e-5;
const std::string kSource = WG_SOURCE_DIR;

// A fresh, empty directory for one test.
fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("wg_parity_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// Runs twin.py with `args`; on a non-zero exit adds a failure with the twin's output.
bool run_twin(const fs::path& dir, const std::string& args) {
  const fs::path log = dir / "twin.log";
  const std::string cmd = "/usr/bin/python3 '" + kSource + "/tests/reference/twin.py' " + args + " > '" +
                          log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "twin failed (status " << rc << "): " << cmd << "\n--- twin output ---\n" << read_text(log);
    return false;
  }
  return true;
}

std::map<std::string, torch::Tensor> read_tensors(const fs::path& p) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& r : read_safetensors(p.string()).tensors) out[r.name] = to_tensor(r);
  return out;
}

double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.detach().to(torch::kFloat64), y = b.detach().to(torch::kFloat64);
  const double diff = (x - y).abs().max().item<double>();
  const double scale = std::max(y.abs().max().item<double>(), 1e-12);
  return diff / scale;
}

// Compares every tensor of `cpp` with the twin's tensor of the same name; the
// name sets must be equal. Failures name the tensor and the error.
void expect_match(const std::map<std::string, torch::Tensor>& cpp, const std::map<std::string, torch::Tensor>& twin,
                  const std::string& what) {
  int compared = 0;
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, a] : cpp) {
    auto it = twin.find(name);
    if (it == twin.end()) {
      ADD_FAILURE() << what << ": the twin has no tensor '" << name << "'";
      continue;
    }
    const torch::Tensor& b = it->second;
    if (a.sizes() != b.sizes()) {
      ADD_FAILURE() << what << ": " << name << " shape C++ " << a.sizes() << ", twin " << b.sizes();
      continue;
    }
    ++compared;
    if (a.numel() == 0) continue;
    const double e = rel_err(a, b);
    if (e > worst) worst = e, worst_name = name;
    EXPECT_LE(e, kTol) << what << ": " << name << " relative error " << e << " (max|C++ - twin| / max|twin|, max|twin| "
                       << b.abs().max().item<double>() << ")";
  }
  for (const auto& [name, b] : twin)
    if (!cpp.count(name)) ADD_FAILURE() << what << ": the C++ side has no tensor '" << name << "'";
  EXPECT_GT(compared, 0) << what;
  std::printf("[parity] %s: %d tensors, worst relative error %.3g (%s)\n", what.c_str(), compared, worst,
              worst_name.c_str());
}

std::map<std::string, torch::Tensor> grads_of(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.named_parameters())
    if (p.value().grad().defined()) out["grad." + p.key()] = p.value().grad().detach().clone();
  return out;
}

// ---------------------------------------------------------------- embed transformer alone

struct EmbedCase {
  std::string label;
  EmbedOptions o;
  int n = 6;
};

std::string spec_json(const EmbedOptions& o) {
  std::ostringstream s;
  s << "{\"num_tokens\": " << o.num_tokens << ", \"token_size\": " << o.token_size
    << ", \"num_channels\": " << o.num_channels << ", \"dim_embed\": " << o.dim_embed << ", \"dim_out\": " << o.dim_out
    << ", \"num_blocks\": " << o.num_blocks << ", \"num_heads\": " << o.num_heads << ", \"norm_type\": \""
    << o.norm_type << "\", \"embed_size_centroids\": " << o.embed_size_centroids << ", \"unembed_mode\": \""
    << o.unembed_mode << "\"}";
  return s.str();
}

EmbedOptions embed_opts(int tokens, int ts, int C, int dim_embed, int dim_out, int blocks, int heads,
                        const std::string& mode, int centroids, const std::string& norm = "LayerNorm") {
  EmbedOptions o;
  o.num_tokens = tokens;
  o.token_size = ts;
  o.num_channels = C;
  o.dim_embed = dim_embed;
  o.dim_out = dim_out;
  o.num_blocks = blocks;
  o.num_heads = heads;
  o.dropout_rate = 0.0;
  o.norm_type = norm;
  o.embed_size_centroids = centroids;
  o.unembed_mode = mode;
  o.bf16_attention_on_cuda = false;
  return o;
}

using TensorMap = std::map<std::string, torch::Tensor>;

// Runs one case in C++ and in the twin; returns {C++ tensors, twin tensors}
// (empty maps when the twin failed).
std::pair<TensorMap, TensorMap> run_embed(const EmbedCase& c, bool checkpoint) {
  const fs::path dir = fresh_dir("embed_" + c.label + (checkpoint ? "_ckpt" : ""));
  torch::manual_seed(11);
  StreamEmbedTransformer m(c.o);
  m->eval();
  if (checkpoint) {
    RecomputePlan plan(m->piece_keys());
    for (size_t i = 0; i < plan.size(); ++i) plan.set(i, true);
    m->set_plan(plan);
  }
  torch::Tensor x = torch::randn({c.n, c.o.token_size, c.o.num_channels});
  torch::Tensor cen = c.o.embed_size_centroids > 0 ? torch::randn({c.n, kCentroidFeatures}) : torch::Tensor();
  SafetensorsFile in;
  in.tensors.push_back(to_record("x_in", x, DType::F32));
  if (cen.defined()) in.tensors.push_back(to_record("centroids", cen, DType::F32));
  write_safetensors((dir / "inputs.safetensors").string(), in);
  save_weights(*m, (dir / "weights.safetensors").string());
  write_text(dir / "spec.json", spec_json(c.o));

  x.requires_grad_(true);
  torch::Tensor out = m->forward(x, cen);
  EXPECT_EQ(out.sizes(), torch::IntArrayRef({c.n, c.o.num_tokens, c.o.dim_out}));
  out.pow(2).mean().backward();
  std::map<std::string, torch::Tensor> cpp = grads_of(*m);
  cpp["out"] = out.detach();
  cpp["grad.x_in"] = x.grad().detach();

  if (!run_twin(dir, "embed --spec '" + (dir / "spec.json").string() + "' --weights '" +
                         (dir / "weights.safetensors").string() + "' --inputs '" +
                         (dir / "inputs.safetensors").string() + "' --out '" + (dir / "out.safetensors").string() +
                         "'" + (checkpoint ? " --checkpoint" : "")))
    return {};
  return {cpp, read_tensors(dir / "out.safetensors")};
}

void check_embed(const EmbedCase& c, bool checkpoint) {
  SCOPED_TRACE(c.label);
  const auto [cpp, twin] = run_embed(c, checkpoint);
  if (twin.empty()) return;  // run_twin reported the failure
  expect_match(cpp, twin, "embed " + c.label + (checkpoint ? " (recomputed)" : ""));
}

std::vector<EmbedCase> embed_cases() {
  return {
      // 2*10 = 20 outputs, 3 channels: e = 20 % 3 = 2, d_c = 6, two zero-padded columns
      {"block_padding", embed_opts(2, 4, 3, 16, 10, 2, 2, "block", 0)},
      // 16 outputs, 5 channels, 4 centroid columns: e = 4 + 12 % 5 = 6, d_c = 2
      {"block_centroids", embed_opts(1, 4, 5, 16, 16, 2, 2, "block", 4)},
      {"full", embed_opts(2, 4, 3, 16, 8, 2, 2, "full", 0)},
      {"full_centroids_rms", embed_opts(1, 2, 4, 16, 12, 3, 4, "full", 4, "RMSNorm")},
  };
}

TEST(Parity, EmbedTransformerMatchesTwin) {
  for (const EmbedCase& c : embed_cases()) check_embed(c, false);
}

TEST(Parity, EmbedTransformerRecomputedMatchesTwinCheckpoint) {
  for (const EmbedCase& c : embed_cases()) check_embed(c, true);
}

// The comparison is not vacuous: outputs are non-trivial, and a relative
// change of 2e-5 in one gradient (twice the tolerance) is caught and named.
TEST(Parity, ComparisonCatchesASmallError) {
  auto [cpp, twin] = run_embed(embed_cases()[0], false);
  ASSERT_FALSE(twin.empty());
  ASSERT_GT(twin.at("out").abs().max().item<double>(), 0.0);
  ASSERT_GT(twin.at("grad.embed.weight").abs().max().item<double>(), 0.0);
  const torch::Tensor kept = twin["grad.embed.weight"];
  twin["grad.embed.weight"] = kept * (1 + 2e-5);
  EXPECT_NONFATAL_FAILURE(expect_match(cpp, twin, "perturbed"), "grad.embed.weight relative error");
  twin["grad.embed.weight"] = kept;
  twin.erase("grad.x_in");
  EXPECT_NONFATAL_FAILURE(expect_match(cpp, twin, "missing"), "the twin has no tensor 'grad.x_in'");
}

// ---------------------------------------------------------------- whole model

// Loads a config file through the project's loader and writes the resolved
// YAML (every key, streams_directory absolute) that the twin reads.
struct ResolvedRun {
  Config config;
  fs::path yaml;
};

ResolvedRun load_and_resolve(const std::vector<std::string>& files, const fs::path& dir) {
  ConfigSources sources;
  sources.files = files;
  sources.overrides = {"embed_dropout_rate=0.0", "ae_global_dropout_rate=0.0"};
  ResolvedRun out;
  out.config = load_config(sources);
  out.yaml = dir / "config.yml";
  write_text(out.yaml, resolved_config_yaml(sources));
  return out;
}

// Two streams of different shapes (channels, token size, depth, tokens per
// input token), centroid embedding, mse + mae: laid over the defaults.
fs::path write_two_stream_config(const fs::path& dir) {
  write_text(dir / "two" / "streams" / "two.yml",
             "ERA5:\n"
             "  type: synthetic\n"
             "  token_size: 4\n"
             "  embed: {net: transformer, num_tokens: 1, num_heads: 2, dim_embed: 16, num_blocks: 4}\n"
             "  synthetic: {num_channels: 5, grid_lat: 4, grid_lon: 6, num_waves: 4, noise: 0.05}\n"
             "SYNOP:\n"
             "  type: synthetic\n"
             "  loss_weight: 0.5\n"
             "  token_size: 2\n"
             "  embed: {net: transformer, num_tokens: 2, num_heads: 2, dim_embed: 16, num_blocks: 2}\n"
             "  synthetic: {num_channels: 3, grid_lat: 3, grid_lon: 4, num_waves: 4, noise: 0.05}\n");
  write_text(dir / "two" / "two.yml",
             "streams_directory: streams/\n"
             "seed: 7\n"
             "ae_local_dim_embed: 16\n"
             "ae_global_dim_embed: 32\n"
             "ae_global_num_blocks: 2\n"
             "ae_global_num_heads: 2\n"
             "embed_size_centroids: 4\n"
             "loss_fcts: [[mse, 1.0], [mae, 0.5]]\n"
             "batch_size_per_gpu: 2\n"
             "masking_rate_sampling: false\n"
             "with_mixed_precision: false\n"
             "device: cpu\n");
  return dir / "two" / "two.yml";
}

Config with_mode(Config c, RecomputeMode mode) {
  c.gradient_checkpointing = every_section(mode);
  return c;
}

// The twin's `reference` inputs from a real batch of the dataset.
SafetensorsFile model_inputs(const ModelInput& in) {
  SafetensorsFile f;
  std::string names;
  for (const StreamInput& s : in.streams) {
    names += (names.empty() ? "" : ",") + s.stream;
    f.tensors.push_back(to_record(s.stream + ".values", s.values, DType::F32));
    f.tensors.push_back(to_record(s.stream + ".centroids", s.centroids, DType::F32));
    f.tensors.push_back(to_record(s.stream + ".visible", s.visible, DType::I64));
    f.tensors.push_back(to_record(s.stream + ".masked", s.masked, DType::I64));
  }
  f.metadata["streams"] = names;
  f.metadata["batch_size"] = std::to_string(in.batch_size);
  return f;
}

void check_model(const std::string& label, const std::vector<std::string>& files, bool checkpoint) {
  SCOPED_TRACE(label);
  const fs::path dir = fresh_dir("model_" + label);
  const ResolvedRun lc = load_and_resolve(files, dir);
  const Config& cfg = lc.config;
  Dataset data(cfg, 0, 1);
  torch::manual_seed(cfg.seed);
  WeatherModel model(cfg, data.stream_shapes());
  model->eval();
  const RecomputePlan plan = resolve_plan(with_mode(cfg, checkpoint ? RecomputeMode::Full : RecomputeMode::None));
  if (checkpoint) ASSERT_EQ(plan.pieces_recomputed(), plan.pieces_total());
  model->set_plan(plan);
  const ModelInput in = to_model_input(data.batch(1), torch::kCPU);
  for (const StreamInput& s : in.streams) {
    ASSERT_GT(s.visible.numel(), 0) << s.stream;
    ASSERT_GT(s.masked.numel(), 0) << s.stream;
  }
  write_safetensors((dir / "inputs.safetensors").string(), model_inputs(in));
  save_weights(*model, (dir / "weights.safetensors").string());

  const std::vector<torch::Tensor> preds = model->forward(in);
  torch::Tensor loss = MaskedLoss(cfg)(preds, masked_targets(in));
  loss.backward();
  std::map<std::string, torch::Tensor> cpp = grads_of(*model);
  EXPECT_EQ(cpp.size(), model->named_parameters().size()) << "every parameter should have a gradient";
  cpp["loss"] = loss.detach().reshape({});
  for (size_t s = 0; s < preds.size(); ++s) cpp["pred." + in.streams[s].stream] = preds[s].detach();

  ASSERT_TRUE(run_twin(dir, "reference --config '" + lc.yaml.string() + "' --weights '" +
                                (dir / "weights.safetensors").string() + "' --inputs '" +
                                (dir / "inputs.safetensors").string() + "' --out '" +
                                (dir / "out.safetensors").string() + "'" + (checkpoint ? " --checkpoint" : "")));
  expect_match(cpp, read_tensors(dir / "out.safetensors"), "model " + label);
}

const std::string kTinyYml = kSource + "/config/cpu_tiny.yml";

TEST(Parity, TinyModelMatchesTwin) { check_model("tiny", {kTinyYml}, false); }

TEST(Parity, TwoStreamModelMatchesTwin) {
  const fs::path dir = fresh_dir("two_stream_files");
  check_model("two_stream", {write_two_stream_config(dir).string()}, false);
}

// This project's recomputation (every piece, all sections mode full) against
// torch.utils.checkpoint.checkpoint(use_reentrant=False) on every piece.
TEST(Parity, FullRecomputationMatchesTorchCheckpoint) {
  check_model("tiny_full", {kTinyYml}, true);
  const fs::path dir = fresh_dir("two_stream_files_ckpt");
  check_model("two_stream_full", {write_two_stream_config(dir).string()}, true);
}

// ---------------------------------------------------------------- weights round trip

void check_roundtrip(DType dtype) {
  const std::string tag = dtype_name(dtype);
  SCOPED_TRACE(tag);
  const fs::path dir = fresh_dir(std::string("roundtrip_") + tag);
  const ResolvedRun lc = load_and_resolve({write_two_stream_config(dir).string()}, dir);
  const auto shapes = Dataset(lc.config, 0, 1).stream_shapes();
  torch::manual_seed(3);
  WeatherModel a(lc.config, shapes);
  const fs::path w = dir / "weights.safetensors", back = dir / "back.safetensors";
  save_weights(*a, w.string(), dtype);
  ASSERT_TRUE(run_twin(dir, "roundtrip --config '" + lc.yaml.string() + "' --weights '" + w.string() + "' --out '" +
                                back.string() + "'"));

  // File level: same names, dtypes, shapes and bytes.
  const SafetensorsFile mine = read_safetensors(w.string()), theirs = read_safetensors(back.string());
  std::map<std::string, const TensorRecord*> by_name;
  for (const auto& r : theirs.tensors) by_name[r.name] = &r;
  EXPECT_EQ(mine.tensors.size(), theirs.tensors.size());
  for (const auto& r : mine.tensors) {
    auto it = by_name.find(r.name);
    if (it == by_name.end()) {
      ADD_FAILURE() << "round trip lost " << r.name;
      continue;
    }
    EXPECT_EQ(it->second->dtype, r.dtype) << r.name;
    EXPECT_EQ(it->second->shape, r.shape) << r.name;
    EXPECT_TRUE(it->second->data == r.data) << r.name << ": tensor bytes differ after the round trip";
  }
  EXPECT_EQ(theirs.metadata, mine.metadata);

  // Model level: the file loads back into C++ as what was saved.
  torch::manual_seed(4);
  WeatherModel b(lc.config, shapes);
  EXPECT_EQ(load_weights(*b, back.string()), int(mine.tensors.size()));
  auto pb = b->named_parameters();
  for (const auto& p : a->named_parameters()) {
    const torch::Tensor expect =
        dtype == DType::F32 ? p.value() : p.value().to(torch::kBFloat16).to(torch::kFloat32);
    EXPECT_TRUE(torch::equal(expect, pb[p.key()])) << p.key();
  }
}

TEST(Parity, WeightsRoundTripThroughPyTorchIsExactF32) { check_roundtrip(DType::F32); }

TEST(Parity, WeightsRoundTripThroughPyTorchIsExactBF16) { check_roundtrip(DType::BF16); }

}  // namespace
}  // namespace wg
