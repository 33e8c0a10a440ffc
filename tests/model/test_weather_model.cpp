// WeatherGenerator's model, whole: the default configuration builds
// upstream's state_dict exactly (526 tensors, 400,742,708 parameters, names
// and shapes in order); the model's recomputable pieces are the plan's; B
// samples in one batch give the mean loss and gradients of B batches of one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <limits>
#include <sstream>

#include "../common/tiny_config.h"
#include "wg/data/dataset.h"
#include "wg/model/lean_ops.h"
#include "wg/model/model_options.h"
#include "wg/model/weather_model.h"
#include "wg/plan/recompute_plan.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/loss.h"

namespace wg {
namespace {

using wg::testing::tiny_config;
using wg::testing::without_dropout;

// ERA5 as upstream's config/streams/era5_1deg/era5.yml configures it.
StreamConfig era5_stream() {
  StreamConfig s;
  s.name = "ERA5";
  s.type = "anemoi";
  s.token_size = 8;
  s.embed = {"transformer", 1, 8, 256, 2};
  s.embed_target_coords.dim_embed = 256;
  s.target_readout.num_layers = 2;
  s.target_readout.num_heads = 4;
  return s;
}

// 71 source channels (79 features with the 8 per-point columns), 72 targets.
StreamShape era5_shape() {
  StreamShape shape{"ERA5", 8, false, 0, {}, {}};
  for (int i = 0; i < 71; ++i) shape.source_channels.push_back("s" + std::to_string(i));
  for (int i = 0; i < 72; ++i) shape.target_channels.push_back("t" + std::to_string(i));
  return shape;
}

std::string shape_text(const torch::Tensor& t) {
  std::string out;
  for (int64_t d : t.sizes()) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

// The attention layers' fused projections lie one after another in one
// storage (lean_ops.h: place_adjacent), and still do after the model moves
// to another dtype and back (Module::to gives each parameter its own).
TEST(WeatherModel, FusedProjectionsLieOneAfterAnotherAfterAMove) {
  torch::NoGradGuard no_grad;
  const std::vector<StreamShape> shapes = {{"ERA5", 4, false, 0, {"a", "b"}, {"a"}},
                                           {"SYNOP", 2, false, 1, {"c"}, {"c", "d"}}};
  WeatherModel model(model_options(tiny_config(), shapes));
  // Per layer with keys: k and v one after another; and how many layers
  // have q before them (self-attention).
  const auto check = [&](const char* when) {
    const auto params = model->named_parameters();
    int64_t layers = 0, with_q = 0;
    const std::string k_name = "proj_heads_k.weight";
    for (const auto& p : params) {
      const std::string& key = p.key();
      if (key.size() < k_name.size() || key.compare(key.size() - k_name.size(), k_name.size(), k_name) != 0) continue;
      const std::string layer = key.substr(0, key.size() - k_name.size());
      const torch::Tensor k = p.value(), v = params[layer + "proj_heads_v.weight"];
      ++layers;
      EXPECT_TRUE(lie_adjacent({k, v})) << when << ": " << layer;
      if (params.contains(layer + "proj_heads_q.weight") && lie_adjacent({params[layer + "proj_heads_q.weight"], k, v}))
        ++with_q;
    }
    return std::make_pair(layers, with_q);
  };
  const auto built = check("built");
  EXPECT_GT(built.first, built.second);  // cross-attention: q on its own
  EXPECT_GT(built.second, 0);
  model->to(torch::kFloat64);
  EXPECT_EQ(check("float64"), built);
  model->to(torch::kFloat32);
  EXPECT_EQ(check("float32 again"), built);
}

TEST(WeatherModel, DefaultConfigBuildsUpstreamsStateDict) {
  Config c;  // upstream's defaults
  c.streams = {era5_stream()};
  ASSERT_EQ(era5_shape().source_width(), 79);
  torch::NoGradGuard no_grad;
  WeatherModel model(model_options(c, {era5_shape()}));
  std::ifstream golden(WG_TEST_DIR "/model/era5_state_dict.txt");
  ASSERT_TRUE(golden) << "cannot read " << WG_TEST_DIR "/model/era5_state_dict.txt";
  std::vector<std::string> want;
  for (std::string line; std::getline(golden, line);)
    if (!line.empty() && line[0] != '#') want.push_back(line);
  const auto params = model->named_parameters();
  std::vector<std::string> got;
  int64_t total = 0;
  for (const auto& p : params) {
    got.push_back(p.key() + " " + shape_text(p.value()));
    total += p.value().numel();
  }
  EXPECT_EQ(got.size(), 526u);
  EXPECT_EQ(total, 400742708);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "entry " << i;
  EXPECT_EQ(model->named_buffers().size(), 0u);  // the tables are not in the state_dict
}

TEST(WeatherModel, ItsPiecesAreThePlansPieces) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Config c = tiny_config();
    if (variant == 1) {  // forecast engine, no self-attention in the decoder
      c.forecast_policy = "fixed";
      c.fe_num_blocks = 2;
      c.fe_num_heads = 2;
      c.pred_self_attention = false;
    }
    std::vector<StreamShape> shapes = {{"ERA5", 4, false, 0, {"a", "b"}, {"a"}}, {"SYNOP", 2, false, 1, {"c"}, {"c", "d"}}};
    if (variant == 2) {  // a diagnostic stream has no embed transformer
      c.streams[1].diagnostic = true;
      shapes[1].diagnostic = true;
    }
    WeatherModel model(model_options(c, shapes));
    EXPECT_EQ(model->piece_keys(), model_pieces(c));
    model->set_plan(resolve_plan(c));  // every key of the plan is found
  }
}

struct Step {
  double loss = 0;
  std::vector<torch::Tensor> grads;
};

// In float64, so the comparison is free of float32 summation order.
ModelBatch in_double(ModelBatch in) {
  for (auto& s : in.streams)
    for (auto* list : {&s.source_tokens, &s.source_centroids, &s.target_coords, &s.target_values})
      for (auto& t : *list) t = t.to(torch::kFloat64);
  return in;
}

Step step_on(WeatherModel& model, const Config& c, const std::vector<StreamShape>& shapes, const BuiltBatch& batch) {
  model->zero_grad();
  const ModelBatch in = in_double(to_model_batch(batch, torch::kCPU));
  const PhysicalLoss loss_fn(c, c.training_loss, shapes, true);
  torch::Tensor loss = loss_fn(in, model->forward(in).preds).loss;
  loss.backward();
  Step s;
  s.loss = loss.item<double>();
  for (const auto& p : model->parameters()) s.grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return s;
}

TEST(WeatherModel, BatchOfTwoIsTheMeanOfTwoBatchesOfOne) {
  Config c = without_dropout(tiny_config());
  Dataset data(c, 0, 1);
  torch::manual_seed(c.seed);
  WeatherModel model(model_options(c, data.stream_shapes()));
  model->eval();  // no dropout (the decoder's 0.1 is fixed, as upstream's)
  model->to(torch::kFloat64);
  const BuiltBatch two = data.batch(1);
  ASSERT_EQ(two.sample_ids.size(), 2u);
  const Step both = step_on(model, c, data.stream_shapes(), two);
  const Step a = step_on(model, c, data.stream_shapes(), data.builder().batch({two.sample_ids[0]}, 0));
  const Step b = step_on(model, c, data.stream_shapes(), data.builder().batch({two.sample_ids[1]}, 0));
  EXPECT_NEAR(both.loss, (a.loss + b.loss) / 2, 1e-12 * std::abs(both.loss));
  EXPECT_NE(a.loss, b.loss);  // two different samples
  for (size_t i = 0; i < both.grads.size(); ++i) {
    const torch::Tensor mean = (a.grads[i] + b.grads[i]) / 2;
    const double scale = std::max(1e-12, mean.abs().max().item<double>());
    EXPECT_LE((both.grads[i] - mean).abs().max().item<double>(), 1e-10 * scale) << "parameter " << i;
  }
}

TEST(WeatherModel, EmptyCellsKeepTheirQueryAndTwicePeGlobal) {
  Config c = without_dropout(tiny_config());
  c.ae_global_num_blocks = 0;  // the latent right after the scatter
  Dataset data(c, 0, 1);
  torch::manual_seed(c.seed);
  WeatherModel model(model_options(c, data.stream_shapes()));
  model->eval();
  const ModelBatch in = to_model_batch(data.batch(0), torch::kCPU);
  torch::NoGradGuard no_grad;
  const ModelOutput out = model->forward(in, true);
  const torch::Tensor latent = out.sections.at("ae_global");  // [B, C, D_g]
  const int64_t C = in.num_cells;
  int empty = 0;
  torch::Tensor q_cells;
  for (const auto& p : model->named_parameters())
    if (p.key() == "q_cells") q_cells = p.value();
  for (int64_t g = 0; g < in.num_samples * C; ++g) {
    if (in.source_cell_lens[size_t(g)] > 0) continue;
    ++empty;
    const torch::Tensor want = q_cells[0][0] + 2 * model->tables().pe_global[g % C][0];
    EXPECT_TRUE(torch::allclose(latent[g / C][g % C], want, 1e-6, 1e-6)) << "cell " << g;
  }
  EXPECT_GT(empty, 0) << "the tiny config should leave some cells without tokens";
}

// As upstream (model.py: isnan(tc_tokens)): a NaN in a stream's embedded
// target coordinates (the embedding diverged) gives no prediction for that
// stream this step; the others predict as before.
TEST(WeatherModel, ANanCoordinateEmbeddingGivesNoPredictionForItsStream) {
  Config c = without_dropout(tiny_config());
  Dataset data(c, 0, 1);
  torch::manual_seed(c.seed);
  WeatherModel model(model_options(c, data.stream_shapes()));
  model->eval();
  const ModelBatch in = to_model_batch(data.batch(0), torch::kCPU);
  ASSERT_GE(in.streams.size(), 2u);
  torch::NoGradGuard no_grad;
  const ModelOutput before = model->forward(in);
  ASSERT_TRUE(before.preds.at(0).at(0).defined());
  const std::string name = "embed_target_coords." + in.streams[0].name + ".linear.weight";
  bool found = false;
  for (auto& p : model->named_parameters())
    if (p.key() == name) p.value()[0][0] = std::numeric_limits<float>::quiet_NaN(), found = true;
  ASSERT_TRUE(found) << name;
  const ModelOutput after = model->forward(in);
  EXPECT_FALSE(after.preds.at(0).at(0).defined());
  ASSERT_TRUE(after.preds.at(0).at(1).defined());
  EXPECT_TRUE(torch::equal(after.preds.at(0).at(1), before.preds.at(0).at(1)));
}

// Upstream indexes pe_embed (1024 rows) unchecked: a cell with more source
// tokens than that reads out of range. Here it is one clear error.
TEST(WeatherModel, CellWithMoreThan1024TokensIsAClearError) {
  Config c = without_dropout(tiny_config());
  Dataset data(c, 0, 1);
  WeatherModel model(model_options(c, data.stream_shapes()));
  ModelBatch in = to_model_batch(data.batch(0), torch::kCPU);
  ASSERT_GT(in.streams[1].idxs_embed_pe[0].numel(), 0);
  in.streams[1].idxs_embed_pe[0][0] = 1024;  // the 1025th token of its cell
  try {
    model->forward(in);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    EXPECT_NE(m.find("stream 'SYNOP'"), std::string::npos) << m;
    EXPECT_NE(m.find("more than 1024 source tokens"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace wg
