// Recomputation gives the same loss and gradients as keeping activations,
// bit for bit, in every section and mode with dropout on; and it lowers the
// activation peak by a measured amount.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "../common/thread_count.h"
#include "../common/tiny_config.h"
#include "wg/config/recompute_sections.h"
#include "wg/data/dataset.h"
#include "wg/model/model_options.h"
#include "wg/model/recompute.h"
#include "wg/model/weather_model.h"
#include "wg/plan/piece_key.h"
#include "wg/plan/recompute_plan.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/loss.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

using wg::testing::tiny_config;

struct StepResult {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
};

// One forward/backward of the whole model under `gc`, with fixed weights,
// batch and dropout seed. Forecast mode when `forecast` (one forecast step);
// `queries` query slots a cell (the adapter's); the embeds' read-out
// `unembed_mode`.
StepResult run_step(const RecomputeConfig& gc, bool forecast = false, int queries = 1,
                    const std::string& unembed_mode = "block") {
  Config c = tiny_config();
  c.ae_local_num_queries = queries;
  c.embed_unembed_mode = unembed_mode;
  if (forecast) {
    c.training_mode = "forecast";
    c.forecast_policy = "fixed";
    c.forecast_steps = 1;
    c.fe_num_blocks = 2;
    c.fe_num_heads = 2;
  }
  c.gradient_checkpointing = gc;
  Dataset data(c, 0, 1);
  torch::manual_seed(c.seed);
  WeatherModel model(model_options(c, data.stream_shapes()));
  model->train();
  model->set_plan(resolve_plan(c));
  const ModelBatch in = to_model_batch(data.batch(3), torch::kCPU);
  torch::manual_seed(1234);  // dropout masks
  const PhysicalLoss loss_fn(c, c.training_loss, data.stream_shapes(), true);
  torch::Tensor loss = loss_fn(in, model->forward(in).preds).loss;
  loss.backward();
  StepResult r;
  r.loss = loss.item<double>();
  for (const auto& p : model->named_parameters())
    r.grads[p.key()] = p.value().grad().defined() ? p.value().grad().clone() : torch::Tensor();
  return r;
}

SectionRecompute section(RecomputeMode mode, int every_n = 1, std::vector<int> blocks = {}) {
  SectionRecompute s;
  s.set = true;
  s.mode = mode;
  s.every_n = every_n;
  s.blocks = std::move(blocks);
  return s;
}

void expect_identical(const StepResult& a, const StepResult& b) {
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  int compared = 0;
  for (const auto& [name, ga] : a.grads) {
    const auto& gb = b.grads.at(name);
    ASSERT_EQ(ga.defined(), gb.defined()) << name;
    if (!ga.defined()) continue;
    EXPECT_TRUE(torch::equal(ga, gb)) << name << ": max difference " << (ga - gb).abs().max().item<double>();
    ++compared;
  }
  EXPECT_GT(compared, 50);
}

RecomputeConfig nothing_recomputed() { return every_section(RecomputeMode::None); }

TEST(Recompute, EverySectionAloneIsBitIdenticalToNoneWithDropout) {
  const StepResult ref = run_step(nothing_recomputed());
  for (const auto& sec : recompute_sections()) {
    if (sec.name == "forecast") continue;  // its own test, in forecast mode
    SCOPED_TRACE(sec.name);
    RecomputeConfig gc = nothing_recomputed();
    gc.*sec.field = section(RecomputeMode::Full);
    expect_identical(ref, run_step(gc));
  }
}

TEST(Recompute, EveryModeEverywhereIsBitIdenticalToNone) {
  const StepResult ref = run_step(nothing_recomputed());
  for (auto mode : {RecomputeMode::Full, RecomputeMode::Selective}) {
    SCOPED_TRACE(recompute_mode_name(mode));
    expect_identical(ref, run_step(every_section(mode)));
  }
  SCOPED_TRACE("every_n 2 and block lists");
  RecomputeConfig gc = every_section(RecomputeMode::EveryN, 2);
  gc.ae_global.blocks = {1};
  gc.embed = section(RecomputeMode::None, 1, {1});
  expect_identical(ref, run_step(gc));
}

// Lean and whole pieces side by side, as `pieces` on top of `selective`
// gives them: an embed input that runs lean before a block 0 attention
// recomputed whole (which makes nothing again for it), a recomputed piece
// between lean ones, a decoder head and cross-attention recomputed.
TEST(Recompute, SelectiveWithPiecesRecomputedWholeIsBitIdenticalToNone) {
  const StepResult ref = run_step(nothing_recomputed());
  RecomputeConfig gc = every_section(RecomputeMode::Selective);
  gc.embed.pieces = {"block0.attn"};
  gc.ae_global.pieces = {"block0.mlp"};
  gc.pred.pieces = {"block0.cross", "head"};
  Config c = tiny_config();
  c.gradient_checkpointing = gc;
  const RecomputePlan plan = resolve_plan(c);
  int lean = 0, whole = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const PieceKey& k = plan.pieces()[i];
    if (k.section == "embed" && k.kind == PieceKind::Input) EXPECT_EQ(plan.mode(i), PieceMode::Lean) << k.str();
    lean += plan.mode(i) == PieceMode::Lean;
    whole += plan.mode(i) == PieceMode::Recompute;
  }
  EXPECT_GT(lean, 5);
  EXPECT_GE(whole, 4);
  expect_identical(ref, run_step(gc));
}

// Two query slots a cell: the adapter attends them in one core call, which
// a lean or recomputed adapter runs again as the joint pass.
TEST(Recompute, TwoQuerySlotsAreBitIdenticalToNone) {
  const StepResult ref = run_step(nothing_recomputed(), false, 2);
  for (auto mode : {RecomputeMode::Full, RecomputeMode::Selective}) {
    SCOPED_TRACE(recompute_mode_name(mode));
    expect_identical(ref, run_step(every_section(mode), false, 2));
  }
}

// The embeds' read-out over all channels at once (embed_unembed_mode full),
// recomputed and lean as the block read-out is.
TEST(Recompute, FullReadoutIsBitIdenticalToNone) {
  const StepResult ref = run_step(nothing_recomputed(), false, 1, "full");
  for (auto mode : {RecomputeMode::Full, RecomputeMode::Selective}) {
    SCOPED_TRACE(recompute_mode_name(mode));
    expect_identical(ref, run_step(every_section(mode), false, 1, "full"));
  }
}

TEST(Recompute, ForecastEngineIsBitIdenticalToNone) {
  const StepResult ref = run_step(nothing_recomputed(), true);
  RecomputeConfig gc = nothing_recomputed();
  gc.forecast = section(RecomputeMode::Full);
  expect_identical(ref, run_step(gc, true));
  expect_identical(ref, run_step(every_section(RecomputeMode::Full), true));
}

TEST(Recompute, DropoutIsActiveSoTheComparisonMeansSomething) {
  Config c = tiny_config();
  Dataset data(c, 0, 1);
  torch::manual_seed(c.seed);
  WeatherModel model(model_options(c, data.stream_shapes()));
  model->train();
  const ModelBatch in = to_model_batch(data.batch(0), torch::kCPU);
  const PhysicalLoss loss_fn(c, c.training_loss, data.stream_shapes(), true);
  torch::manual_seed(1);
  const double a = loss_fn(in, model->forward(in).preds).loss.item<double>();
  torch::manual_seed(2);
  const double b = loss_fn(in, model->forward(in).preds).loss.item<double>();
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

// The embed section alone (an ERA5-like stream of 24 features, 4 blocks 32
// wide, dropout on) under `mode`, with the counting allocator, and a
// batch of 256 tokens for it.
struct TinyEmbed {
  Config config;
  StreamEmbedTransformer embed{nullptr};
  torch::Tensor x;
};
TinyEmbed tiny_embed(RecomputeMode mode) {
  install_counting_allocator();
  TinyEmbed t;
  t.config = tiny_config();
  StreamConfig s = wg::testing::tiny_stream("ERA5", 24, 8, 4);
  s.embed.dim_embed = 32;
  t.config.streams = {s};
  t.config.ae_local_dim_embed = 64;
  t.config.gradient_checkpointing.embed = section(mode);
  StreamShape shape{s.name, s.token_size, false, 0, std::vector<std::string>(16, "x"), {"y"}};
  torch::manual_seed(0);
  t.embed = StreamEmbedTransformer(model_options(t.config, {shape}).embeds.front());
  t.embed->train();
  t.embed->set_plan(resolve_plan(t.config));
  t.x = torch::randn({256, s.token_size, shape.source_width()});
  return t;
}

// Peak bytes above the baseline during forward + backward of the embed
// section alone (4 blocks).
int64_t embed_activation_peak(RecomputeMode mode) {
  TinyEmbed t = tiny_embed(mode);
  // warm-up allocates parameter gradients, so they do not count below
  t.embed->forward(t.x).pow(2).mean().backward();
  const int64_t base = memory_snapshot("cpu").current_bytes;
  reset_peak_memory("cpu");
  t.embed->forward(t.x).pow(2).mean().backward();
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

// The embed under `selective` (4 blocks, dropout on), its input piece lean
// (block 0's lean attention makes the input's output again in backward) or
// kept: the bytes held after its forward, and its gradients.
struct EmbedRun {
  int64_t held = 0;
  int64_t input_bytes = 0;     // the input piece's output
  int64_t encoding_bytes = 0;  // its positional encoding [C, d], which the way to make it again holds
  std::map<std::string, torch::Tensor> grads;
};
EmbedRun embed_selective(PieceMode input) {
  TinyEmbed t = tiny_embed(RecomputeMode::Selective);
  RecomputePlan plan = resolve_plan(t.config);
  EXPECT_EQ(plan.mode(*PieceKey::parse("embed.ERA5/input")), PieceMode::Lean);  // selective's
  plan.set_mode(*PieceKey::parse("embed.ERA5/input"), input);
  StreamEmbedTransformer& embed = t.embed;
  const torch::Tensor& x = t.x;
  embed->set_plan(plan);
  torch::manual_seed(1);
  embed->forward(x).pow(2).mean().backward();  // parameter gradients allocated
  for (auto& p : embed->parameters())
    if (p.grad().defined()) p.mutable_grad().zero_();
  EmbedRun r;
  const int64_t base = memory_snapshot("cpu").current_bytes;
  torch::manual_seed(2);
  const torch::Tensor out = embed->forward(x);
  r.held = memory_snapshot("cpu").current_bytes - base - int64_t(out.nbytes());
  r.encoding_bytes = x.size(-1) * 32 * int64_t(sizeof(float));  // [C, d]: C the stream's features
  r.input_bytes = int64_t(x.size(0)) * r.encoding_bytes;
  out.pow(2).mean().backward();
  for (const auto& p : embed->named_parameters())
    if (p.value().grad().defined()) r.grads[p.key()] = p.value().grad().clone();
  return r;
}

TEST(RecomputeMemory, SelectiveMakesTheEmbedInputAgainInsteadOfKeepingIt) {
  const EmbedRun lean = embed_selective(PieceMode::Lean), kept = embed_selective(PieceMode::Keep);
  std::cout << "held after the embed's forward: input lean " << lean.held << ", kept " << kept.held
            << " bytes (its output " << lean.input_bytes << ")\n";
  EXPECT_EQ(kept.held - lean.held, lean.input_bytes - lean.encoding_bytes);
  ASSERT_EQ(lean.grads.size(), kept.grads.size());
  for (const auto& [name, g] : kept.grads)
    EXPECT_TRUE(torch::equal(g, lean.grads.at(name))) << name;  // the same bits, the input's weight's too
}

// Under LibTorch's profiler each piece's forward is a range named by its
// key, and a recomputed piece's second run in backward one named
// "recompute <key>": a trace shows where each piece's time goes.
TEST(Recompute, TheProfilerNamesEachPieceAndItsRecomputation) {
  Config c = tiny_config();
  Dataset data(c, 0, 1);
  torch::manual_seed(c.seed);
  WeatherModel model(model_options(c, data.stream_shapes()));
  RecomputePlan plan(model->piece_keys());
  const PieceKey recomputed = *PieceKey::parse("ae_global/block1.mlp");
  plan.set_mode(recomputed, PieceMode::Recompute);
  model->set_plan(plan);
  const ModelBatch in = to_model_batch(data.batch(0), torch::kCPU);
  const PhysicalLoss loss_fn(c, c.training_loss, data.stream_shapes(), true);
  std::map<std::string, int> seen;
  {
    const testing::ThreadCount one(1);  // the profiler records the calling thread, which runs a CPU backward
    using namespace torch::autograd::profiler;
    enableProfilerLegacy(ProfilerConfig(ProfilerState::CPU, false, false, false, false));
    loss_fn(in, model->forward(in).preds).loss.backward();
    for (const auto& list : disableProfilerLegacy())
      for (const LegacyEvent& e : list)
        if (e.kindStr() == "push") ++seen[e.name()];
  }
  // Each piece at least once (the embeds and the aggregation run once a sample).
  for (const PieceKey& k : model->piece_keys()) EXPECT_GE(seen[k.str()], 1) << k.str();
  // The recomputed piece runs again once for each run, and nothing else does.
  int reruns = 0;
  for (const auto& [name, count] : seen)
    if (name.rfind("recompute ", 0) == 0) reruns += count;
  EXPECT_EQ(seen["recompute " + recomputed.str()], seen[recomputed.str()]);
  EXPECT_EQ(reruns, seen[recomputed.str()]);
}

}  // namespace
}  // namespace wg
