// Weights and training state in safetensors: round trips, all-at-once
// mismatch reports that load nothing, prefix initialisation, and an exact
// resume from a saved training state.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "../common/tiny_config.h"
#include "wg/io/safetensors.h"
#include "wg/io/training_state.h"
#include "wg/io/weights.h"
#include "wg/model/model_options.h"
#include "wg/train/trainer.h"

namespace wg {
namespace {

namespace fs = std::filesystem;
using wg::testing::tiny_config;

std::string tmp(const std::string& name) { return (fs::temp_directory_path() / ("wg_" + name)).string(); }

WeatherModel model_with_seed(const Config& c, uint64_t seed) {
  const auto shapes = Dataset(c, 0, 1).stream_shapes();
  torch::manual_seed(seed);
  return WeatherModel(model_options(c, shapes));
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
  EXPECT_TRUE(f.find("q_cells"));
  EXPECT_TRUE(f.find("ae_local_global_engine.ae_adapter.0.proj_heads_q.0.weight"));
  EXPECT_TRUE(f.find("pred_heads.SYNOP.pred_heads.0.0.weight"));
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
  f.tensors.erase(std::find_if(f.tensors.begin(), f.tensors.end(), [](const TensorRecord& r) {
    return r.name == "embed_engine.embeds.ERA5.embed.weight";
  }));  // missing
  f.tensors.push_back(to_record("extra.bias", torch::zeros({3}), DType::F32));  // unexpected
  for (auto& r : f.tensors)
    if (r.name == "q_cells") r = to_record(r.name, torch::zeros({5}), DType::F32);  // wrong shape
  WeatherModel b = model_with_seed(c, 2), before = model_with_seed(c, 2);
  try {
    load_weights(*b, f, {}, "ckpt");
    FAIL() << "no error";
  } catch (const WeightsMismatchError& e) {
    ASSERT_EQ(e.problems().size(), 3u) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("missing: embed_engine.embeds.ERA5.embed.weight [16, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected: extra.bias [3]"), std::string::npos) << m;
    EXPECT_NE(m.find("wrong shape: q_cells is [5], the model's q_cells is [1, 1, 32]"),
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
  EXPECT_FALSE(torch::equal(sp["q_cells"], bp["q_cells"]));
  // FILE=MODEL mapping: SYNOP's weights cannot go into ERA5 (different shapes), all reported
  EXPECT_THROW(load_weights(*small, tmp("big.safetensors"),
                            parse_weights_mapping("embed_engine.embeds.SYNOP.=embed_engine.embeds.ERA5.")),
               WeightsMismatchError);
  EXPECT_THROW(load_weights(*small, tmp("big.safetensors"), parse_weights_mapping("nothing.here.")),
               WeightsMismatchError);
}

TEST(TrainingState, ResumeContinuesExactlyAsTheUninterruptedRun) {
  Config c = wg::testing::without_dropout(tiny_config());  // random-generator state is not part of the file
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
  save_training_state(tmp("state.safetensors"), *first.model(), first.optimizer(), 6,
                      first.weight_average()->averaged());
  Trainer resumed(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  const int64_t next = load_training_state(tmp("state.safetensors"), *resumed.model(), resumed.optimizer(),
                                           &resumed.weight_average()->averaged());
  ASSERT_EQ(next, 6);
  for (int64_t k = next; k < 12; ++k) {
    torch::manual_seed(k);
    const StepMetrics m = resumed.step(k);
    EXPECT_EQ(m.loss, losses[size_t(k)]) << "step " << k;
    EXPECT_EQ(m.lr, full.schedule().at(k)) << "step " << k;
  }
  EXPECT_TRUE(same_params(*full.model(), *resumed.model()));
  const auto &a = full.weight_average()->averaged(), &b = resumed.weight_average()->averaged();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "averaged tensor " << i;
  // A training state without the average does not load into a run that keeps one.
  save_training_state(tmp("state_plain.safetensors"), *first.model(), first.optimizer(), 6);
  EXPECT_THROW(load_training_state(tmp("state_plain.safetensors"), *resumed.model(), resumed.optimizer(),
                                   &resumed.weight_average()->averaged()),
               WeightsMismatchError);
}

// The loss scaler's state travels in the metadata, exactly; a state written
// without scaling has none; a damaged one is refused before anything loads.
TEST(TrainingState, KeepsTheLossScale) {
  Config c = tiny_config();
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  const double scale = std::ldexp(1.0, -20) * 3;  // not a power of two: still exact
  save_training_state(tmp("scaled.safetensors"), *t.model(), t.optimizer(), 3, {}, LossScaleState{scale, 17});
  std::optional<LossScaleState> read;
  EXPECT_EQ(load_training_state(tmp("scaled.safetensors"), *t.model(), t.optimizer(), nullptr, &read), 3);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->scale, scale);
  EXPECT_EQ(read->growth_tracker, 17);
  save_training_state(tmp("unscaled.safetensors"), *t.model(), t.optimizer(), 3);
  load_training_state(tmp("unscaled.safetensors"), *t.model(), t.optimizer(), nullptr, &read);
  EXPECT_FALSE(read.has_value());
  SafetensorsFile f = read_safetensors(tmp("scaled.safetensors"));
  f.metadata["loss_scale"] = "-1";
  write_safetensors(tmp("bad_scale.safetensors"), f);
  std::string what;
  try {
    load_training_state(tmp("bad_scale.safetensors"), *t.model(), t.optimizer(), nullptr, &read);
  } catch (const SafetensorsError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("loss_scale '-1'"), std::string::npos) << what;
}

TEST(TrainingState, PlainWeightsAreNotATrainingState) {
  Config c = tiny_config();
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  save_weights(*t.model(), tmp("plain.safetensors"));
  EXPECT_THROW(load_training_state(tmp("plain.safetensors"), *t.model(), t.optimizer()), SafetensorsError);
}

}  // namespace
}  // namespace wg
