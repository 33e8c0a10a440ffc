// Weights and training state in safetensors: round trips, all-at-once
// mismatch reports that load nothing, prefix initialisation, and an exact
// resume from a saved training state.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "../common/tiny_config.h"
#include "wg/io/training_state.h"
#include "wg/io/weights.h"
#include "wg/train/trainer.h"

namespace wg {
namespace {

namespace fs = std::filesystem;
using wg::testing::tiny_config;

std::string tmp(const std::string& name) { return (fs::temp_directory_path() / ("wg_" + name)).string(); }

WeatherModel model_with_seed(const Config& c, uint64_t seed) {
  const auto shapes = Dataset(c, 0, 1).stream_shapes();
  torch::manual_seed(seed);
  return WeatherModel(c, shapes);
}

bool same_params(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (const auto& p : pa)
    if (!torch::equal(p.value(), pb[p.key()])) return false;
  return pa.size() == pb.size();
}

TEST(Weights, RoundTripIsExactAndNamesAreStateDictNames) {
  Config c = tiny_config();
  WeatherModel a = model_with_seed(c, 1), b = model_with_seed(c, 2);
  ASSERT_FALSE(same_params(*a, *b));
  save_weights(*a, tmp("w.safetensors"));
  const SafetensorsFile f = read_safetensors(tmp("w.safetensors"));
  EXPECT_TRUE(f.find("embed_engine.embeds.ERA5.layers.0.proj_heads_q.weight"));
  EXPECT_TRUE(f.find("latent_adapter.mask_token"));
  EXPECT_EQ(int(f.tensors.size()), int(a->named_parameters().size()));
  EXPECT_EQ(load_weights(*b, tmp("w.safetensors")), int(f.tensors.size()));
  EXPECT_TRUE(same_params(*a, *b));
}

TEST(Weights, HalfPrecisionStorageLoadsAsStored) {
  Config c = tiny_config();
  WeatherModel a = model_with_seed(c, 1), b = model_with_seed(c, 2);
  for (DType d : {DType::BF16, DType::F16}) {
    save_weights(*a, tmp("half.safetensors"), d);
    EXPECT_EQ(read_safetensors(tmp("half.safetensors")).tensors[0].dtype, d);
    load_weights(*b, tmp("half.safetensors"));
    const auto torch_type = d == DType::BF16 ? torch::kBFloat16 : torch::kFloat16;
    for (const auto& p : a->named_parameters())
      EXPECT_TRUE(torch::equal(p.value().to(torch_type).to(torch::kFloat32), b->named_parameters()[p.key()]))
          << p.key();
  }
}

TEST(Weights, AllMismatchesAtOnceAndNothingLoaded) {
  Config c = tiny_config();
  WeatherModel a = model_with_seed(c, 1);
  SafetensorsFile f = weights_file(*a);
  f.tensors.erase(f.tensors.begin());                   // missing
  f.tensors.push_back(to_record("extra.bias", torch::zeros({3}), DType::F32));  // unexpected
  for (auto& r : f.tensors)
    if (r.name == "latent_adapter.mask_token") r = to_record(r.name, torch::zeros({5}), DType::F32);  // wrong shape
  WeatherModel b = model_with_seed(c, 2), before = model_with_seed(c, 2);
  try {
    load_weights(*b, f, {}, "ckpt");
    FAIL() << "no error";
  } catch (const WeightsMismatchError& e) {
    ASSERT_EQ(e.problems().size(), 3u) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("missing: embed_engine.embeds.ERA5.embed.weight [16, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected: extra.bias [3]"), std::string::npos) << m;
    EXPECT_NE(m.find("wrong shape: latent_adapter.mask_token is [5], the model's latent_adapter.mask_token is [32]"),
              std::string::npos) << m;
    EXPECT_NE(m.find("nothing loaded"), std::string::npos);
  }
  EXPECT_TRUE(same_params(*b, *before));
}

TEST(Weights, PrefixInitialisesOneStreamFromALargerCheckpoint) {
  Config c = tiny_config();
  WeatherModel big = model_with_seed(c, 1);
  save_weights(*big, tmp("big.safetensors"));
  // a model with only the ERA5 stream takes ERA5's embed transformer
  Config one = c;
  one.streams = {c.streams[0]};
  WeatherModel small = model_with_seed(one, 3);
  const std::string prefix = "embed_engine.embeds.ERA5.";
  EXPECT_GT(load_weights(*small, tmp("big.safetensors"), parse_weights_mapping(prefix)), 10);
  auto bp = big->named_parameters(), sp = small->named_parameters();
  for (const auto& p : sp) {
    if (p.key().rfind(prefix, 0) == 0) EXPECT_TRUE(torch::equal(p.value(), bp[p.key()])) << p.key();
  }
  EXPECT_FALSE(torch::equal(sp["latent_adapter.mask_token"], bp["latent_adapter.mask_token"]));
  // FILE=MODEL mapping: SYNOP's weights cannot go into ERA5 (different shapes), all reported
  EXPECT_THROW(load_weights(*small, tmp("big.safetensors"),
                            parse_weights_mapping("embed_engine.embeds.SYNOP.=embed_engine.embeds.ERA5.")),
               WeightsMismatchError);
  EXPECT_THROW(load_weights(*small, tmp("big.safetensors"), parse_weights_mapping("nothing.here.")),
               WeightsMismatchError);
}

TEST(TrainingState, ResumeContinuesExactlyAsTheUninterruptedRun) {
  Config c = tiny_config();
  c.embed_dropout_rate = 0.0;  // random-generator state is not part of the file
  c.ae_global_dropout_rate = 0.0;
  c.samples_per_mini_epoch = 24;  // 12 steps
  Trainer full(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  std::vector<double> losses;
  for (int64_t k = 0; k < 12; ++k) {
    torch::manual_seed(k);  // final dropout of the embed
    losses.push_back(full.step(k).loss);
  }
  Trainer first(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  for (int64_t k = 0; k < 6; ++k) {
    torch::manual_seed(k);
    first.step(k);
  }
  save_training_state(tmp("state.safetensors"), *first.model(), first.optimizer(), 6);
  Trainer resumed(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  const int64_t next = load_training_state(tmp("state.safetensors"), *resumed.model(), resumed.optimizer());
  ASSERT_EQ(next, 6);
  for (int64_t k = next; k < 12; ++k) {
    torch::manual_seed(k);
    EXPECT_EQ(resumed.step(k).loss, losses[size_t(k)]) << "step " << k;
  }
  EXPECT_TRUE(same_params(*full.model(), *resumed.model()));
}

TEST(TrainingState, PlainWeightsAreNotATrainingState) {
  Config c = tiny_config();
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  save_weights(*t.model(), tmp("plain.safetensors"));
  EXPECT_THROW(load_training_state(tmp("plain.safetensors"), *t.model(), t.optimizer()), SafetensorsError);
}

}  // namespace
}  // namespace wg
