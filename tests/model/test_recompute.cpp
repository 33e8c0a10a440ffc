// Recomputation gives the same gradients as keeping activations (dropout
// on, every mode), and it lowers the activation peak by a measured amount.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../common/tiny_config.h"
#include "wg/data/dataset.h"
#include "wg/model/recompute.h"
#include "wg/plan/recompute_plan.h"
#include "wg/model/weather_model.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/loss.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

using wg::testing::tiny_config;

// Gradients of every parameter after one forward/backward of the whole model
// under `gc`, with fixed weights, batch and dropout seed.
std::map<std::string, torch::Tensor> gradients(const RecomputeConfig& gc, double* loss_out = nullptr) {
  Config c = tiny_config();
  c.gradient_checkpointing = gc;
  Dataset data(c, 0, 1);
  torch::manual_seed(c.seed);
  WeatherModel model(c, data.stream_shapes());
  model->train();
  model->set_plan(resolve_plan(c));
  ModelInput in = to_model_input(data.batch(3), torch::kCPU);
  torch::manual_seed(1234);  // dropout masks
  torch::Tensor loss = MaskedLoss(c)(model->forward(in), masked_targets(in));
  loss.backward();
  if (loss_out) *loss_out = loss.item<double>();
  std::map<std::string, torch::Tensor> g;
  for (const auto& p : model->named_parameters()) g[p.key()] = p.value().grad().defined() ? p.value().grad().clone() : torch::Tensor();
  return g;
}

SectionRecompute section(RecomputeMode mode, int every_n = 1, std::vector<int> blocks = {}) {
  SectionRecompute s;
  s.set = true;
  s.mode = mode;
  s.every_n = every_n;
  s.blocks = std::move(blocks);
  return s;
}

void expect_same(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  int compared = 0;
  for (const auto& [name, ga] : a) {
    const auto& gb = b.at(name);
    ASSERT_EQ(ga.defined(), gb.defined()) << name;
    if (!ga.defined()) continue;
    const double diff = (ga - gb).abs().max().item<double>();
    EXPECT_LE(diff, 1e-6) << name;
    ++compared;
  }
  EXPECT_GT(compared, 50);
}

RecomputeConfig nothing_recomputed() {
  RecomputeConfig none;
  none.embed = none.latent = none.pred = section(RecomputeMode::None);
  return none;
}

TEST(Recompute, EveryModeGivesTheSameGradientsWithDropout) {
  double loss_ref = 0, loss = 0;
  const auto ref = gradients(nothing_recomputed(), &loss_ref);
  // Dropout really is on: a different dropout seed changes the gradients.
  struct Case { const char* name; RecomputeConfig gc; };
  std::vector<Case> cases;
  RecomputeConfig all;
  all.embed = all.latent = all.pred = section(RecomputeMode::Full);
  cases.push_back({"full everywhere", all});
  RecomputeConfig sel = nothing_recomputed();
  sel.embed = sel.latent = section(RecomputeMode::Selective);
  cases.push_back({"selective", sel});
  RecomputeConfig every = nothing_recomputed();
  every.embed = section(RecomputeMode::EveryN, 2);
  every.latent = section(RecomputeMode::EveryN, 2);
  cases.push_back({"every_n 2", every});
  RecomputeConfig list = nothing_recomputed();
  list.embed = section(RecomputeMode::None, 1, {1, 3});
  list.pred = section(RecomputeMode::Full);
  cases.push_back({"block list + pred", list});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_same(ref, gradients(c.gc, &loss));
    EXPECT_EQ(loss, loss_ref);
  }
}

TEST(Recompute, DropoutIsActiveSoTheComparisonMeansSomething) {
  Config c = tiny_config();
  Dataset data(c, 0, 1);
  torch::manual_seed(c.seed);
  WeatherModel model(c, data.stream_shapes());
  model->train();
  ModelInput in = to_model_input(data.batch(0), torch::kCPU);
  torch::manual_seed(1);
  const double a = MaskedLoss(c)(model->forward(in), masked_targets(in)).item<double>();
  torch::manual_seed(2);
  const double b = MaskedLoss(c)(model->forward(in), masked_targets(in)).item<double>();
  EXPECT_NE(a, b);
}

TEST(Recompute, InputWithoutGradAndUnusedParameter) {
  torch::manual_seed(0);
  torch::Tensor w = torch::randn({4, 4}, torch::requires_grad());
  torch::Tensor unused = torch::randn({3}, torch::requires_grad());
  torch::Tensor x = torch::randn({2, 4});  // data: no grad
  PieceFn fn = [&](const torch::Tensor& t) { return torch::dropout(torch::tanh(t.matmul(w)), 0.5, true); };
  torch::manual_seed(5);
  fn(x).sum().backward();
  torch::Tensor ref = w.grad().clone();
  w.grad().zero_();
  torch::manual_seed(5);
  torch::Tensor y = recomputed(fn, x, {w, unused});
  torch::randn({100});  // consume random numbers between forward and backward
  y.sum().backward();
  EXPECT_TRUE(torch::equal(w.grad(), ref));
  EXPECT_FALSE(unused.grad().defined());
}

TEST(Recompute, InputGradientFlowsThrough) {
  torch::Tensor w = torch::randn({4, 4}, torch::requires_grad());
  torch::Tensor x = torch::randn({2, 4}, torch::requires_grad());
  PieceFn fn = [&](const torch::Tensor& t) { return (t.matmul(w)).pow(2); };
  fn(x).sum().backward();
  torch::Tensor gx = x.grad().clone(), gw = w.grad().clone();
  x.grad().zero_();
  w.grad().zero_();
  run_piece(true, fn, x, {w}).sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), gx, 0, 0));
  EXPECT_TRUE(torch::allclose(w.grad(), gw, 0, 0));
}

TEST(Recompute, NoGraphWorkInEvalUnderNoGrad) {
  torch::Tensor w = torch::randn({4, 4}, torch::requires_grad());
  torch::NoGradGuard no_grad;
  torch::Tensor y = run_piece(true, [&](const torch::Tensor& t) { return t.matmul(w); }, torch::randn({2, 4}), {w});
  EXPECT_FALSE(y.requires_grad());
}

// Peak bytes above the baseline during forward + backward of the embed
// section alone (4 blocks).
int64_t embed_activation_peak(RecomputeMode mode) {
  install_counting_allocator();
  Config c = tiny_config();
  StreamConfig s = wg::testing::tiny_stream("ERA5", 24, 8, 4);
  s.embed.dim_embed = 32;
  c.streams = {s};
  c.ae_local_dim_embed = 64;
  c.gradient_checkpointing.embed = section(mode);
  torch::manual_seed(0);
  StreamEmbedTransformer embed(embed_options(c, s, StreamShape{s.name, s.token_size, 24, {}}));
  embed->train();
  embed->set_plan(resolve_plan(c));
  torch::Tensor x = torch::randn({256, s.token_size, 24});
  // warm-up allocates parameter gradients, so they do not count below
  embed->forward(x).pow(2).mean().backward();
  const int64_t base = memory_snapshot("cpu").current_bytes;
  reset_peak_memory("cpu");
  embed->forward(x).pow(2).mean().backward();
  return memory_snapshot("cpu").peak_bytes - base;
}

TEST(RecomputeMemory, FullRecomputationHalvesTheActivationPeakAtFourBlocks) {
  const int64_t none = embed_activation_peak(RecomputeMode::None);
  const int64_t selective = embed_activation_peak(RecomputeMode::Selective);
  const int64_t full = embed_activation_peak(RecomputeMode::Full);
  RecordProperty("peak_none", std::to_string(none));
  RecordProperty("peak_full", std::to_string(full));
  std::cout << "activation peak: none " << none << " selective " << selective << " full " << full << " bytes\n";
  EXPECT_LT(full, none / 2);
  EXPECT_LT(selective, none);
  EXPECT_LT(full, selective);
}

}  // namespace
}  // namespace wg
