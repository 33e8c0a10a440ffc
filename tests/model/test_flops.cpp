// The FLOP count (wg/model/flops.h): a hand count of a small model, and the
// count of a real forward of the tiny configuration as LibTorch's profiler
// sees it (its FLOPs of every matrix product it ran).
#include <gtest/gtest.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <cstring>
#include <functional>
#include <tuple>

#include "../common/thread_count.h"
#include "../common/tiny_config.h"
#include "wg/config/recompute_sections.h"
#include "wg/data/dataset.h"
#include "wg/model/attention.h"
#include "wg/model/flops.h"
#include "wg/model/model_batch.h"
#include "wg/model/model_options.h"
#include "wg/model/recompute.h"
#include "wg/model/weather_model.h"
#include "wg/plan/recompute_plan.h"
#include "wg/train/batch_tensors.h"

namespace wg {
namespace {

EngineOptions engine(const std::string& section, int64_t dim) {
  EngineOptions e;
  e.section = section;
  e.dim = dim;
  e.num_blocks = 1;
  e.num_heads = 2;
  e.mlp_hidden_factor = 2;
  return e;
}

// One stream; 4 cells holding 2, 0, 1, 0 tokens; 3 target points in cells 0 and 1.
TEST(Flops, HandCountOfASmallModel) {
  ModelOptions o;
  EmbedOptions e;
  e.stream = "S";
  e.num_tokens = 1, e.token_size = 2, e.num_channels = 3, e.dim_embed = 4, e.dim_out = 8, e.num_blocks = 1;
  e.num_heads = 2;
  o.embeds = {e};
  o.dim_local = 8, o.dim_global = 16, o.num_queries = 1;
  o.local = engine("ae_local", 8);
  o.adapter.dim_q = 16, o.adapter.dim_kv = 8, o.adapter.num_heads = 2, o.adapter.dim_head = 4;
  o.aggregation = engine("ae_aggregation", 16);
  o.global = engine("ae_global", 16);
  o.forecast = engine("forecast", 16);
  o.forecast.num_blocks = 0;
  DecoderOptions d;
  d.stream = "S";
  d.dim_coords = 6, d.dim_embed = 4, d.num_layers = 1, d.num_heads = 2, d.dim_latent = 16;
  d.num_target_channels = 3;
  o.decoders = {d};
  FlopShape s;
  s.num_samples = 1, s.num_cells = 4, s.num_tokens = 3, s.num_target_steps = 1;
  s.source_cell_lens = {2, 0, 1, 0};
  s.streams = {{"S", 3, {{1, 2, 0, 0}}}};

  const ModelFlops f = model_flops(o, s, CoreKernel::Cpu);
  const auto piece = [&](const std::string& key) {
    for (const PieceFlops& p : f.pieces)
      if (p.key.str() == key) return p;
    ADD_FAILURE() << "no piece " << key;
    return PieceFlops{};
  };
  const auto at = [&](const std::string& key) { return piece(key).forward; };
  // embed: 3 tokens x 3 channels = 9 rows of width 4
  EXPECT_EQ(at("embed.S/input"), 2 * 9 * 2 * 4);                              // 144
  EXPECT_EQ(at("embed.S/block0.attn"), 4 * 2 * 9 * 4 * 4 + 3 * 4 * 3 * 3 * 4);  // q k v out + 3 x (3x3 over width 4)
  EXPECT_EQ(at("embed.S/block0.mlp"), 2 * 9 * 4 * 8 * 2);                      // 1152
  EXPECT_EQ(at("embed.S/readout"), 2 * 9 * 4 * 2);                             // total 8 = 2 (centroid pad) + 3 x 2
  // local: 3 tokens of width 8, cells of 2 and 1
  EXPECT_EQ(at("ae_local/block0.attn"), 4 * 2 * 3 * 8 * 8 + 4 * (2 * 2 + 1 * 1) * 8);  // 1696
  EXPECT_EQ(at("ae_local/block0.mlp"), 2 * 3 * 8 * 16 * 2);                           // 1536
  // adapter: 2 non-empty cells, one query each; heads 2 x 4 = 8
  const double cross = 2 * 2 * 16 * 8 + 2 * (2 * 3 * 8 * 8) + 4 * (2 + 1) * 8 + 2 * 2 * 8 * 16;  // 1888
  EXPECT_EQ(at("ae_adapter/block0.cross"), cross);
  EXPECT_EQ(at("ae_adapter/block1.cross"), cross);
  EXPECT_EQ(at("ae_adapter/block0.mlp"), 2 * 2 * 16 * 32 * 2);  // 4096
  // aggregation: one sample of 2 cells; global: 4 cells
  EXPECT_EQ(at("ae_aggregation/block0.attn"), 4 * 2 * 2 * 16 * 16 + 4 * 2 * 2 * 16);  // 4352
  EXPECT_EQ(at("ae_global/block0.attn"), 4 * 2 * 4 * 16 * 16 + 4 * 4 * 4 * 16);        // 9216
  EXPECT_EQ(at("ae_global/block0.mlp"), 2 * 4 * 16 * 32 * 2);                          // 8192
  // decoder: 3 points, width 4, coords 6 (AdaLayerNorm 6 -> 24 -> 8); keys
  // and values from the 4 latent tokens of 16 (projected once each, then
  // gathered into 36 neighbourhood rows)
  const double ada = 2 * 3 * 6 * 24 + 2 * 3 * 24 * 8;  // 2016
  EXPECT_EQ(at("pred.S/input"), 2 * 3 * 6 * 4);
  EXPECT_EQ(at("pred.S/block0.cross"), ada + 2 * 3 * 4 * 4 + 2 * (2 * 4 * 16 * 4) + 4 * (1 + 2) * 9 * 4 + 2 * 3 * 4 * 4);
  EXPECT_EQ(at("pred.S/block0.attn"), ada + 4 * 2 * 3 * 4 * 4 + 4 * (1 + 4) * 4);  // 2480
  EXPECT_EQ(at("pred.S/block0.mlp"), ada + 2 * 3 * 4 * 8 * 2);                    // 2400
  EXPECT_EQ(at("pred.S/head"), 2 * 3 * 4 * 3);
  EXPECT_EQ(f.outside_pieces, 0.0);
  EXPECT_EQ(f.forward(), 48744.0);  // 3024 + 3232 + 7872 + 8448 + 17408 + 8760

  // The last products, which a recomputation does not run again: the
  // output projections and the MLPs' second layers; none outside blocks.
  EXPECT_EQ(piece("embed.S/block0.attn").last_product, 2 * 9 * 4 * 4);
  EXPECT_EQ(piece("embed.S/block0.mlp").last_product, 2 * 9 * 8 * 4);
  EXPECT_EQ(piece("ae_adapter/block1.cross").last_product, 2 * 2 * 8 * 16);
  EXPECT_EQ(piece("ae_global/block0.attn").last_product, 2 * 4 * 16 * 16);   // 2048
  EXPECT_EQ(piece("ae_global/block0.mlp").last_product, 2 * 4 * 32 * 16);    // 4096
  EXPECT_EQ(piece("pred.S/block0.cross").last_product, 2 * 3 * 4 * 4);
  EXPECT_EQ(piece("pred.S/block0.mlp").last_product, 2 * 3 * 8 * 4);
  for (const char* io : {"embed.S/input", "embed.S/readout", "pred.S/input", "pred.S/head"})
    EXPECT_EQ(piece(io).last_product, 0.0) << io;
  // What a lean piece runs again: its AdaLayerNorms' first products, and
  // its attention cores where they are cheap (lean_reruns_core, saving.h:
  // the core at most a quarter of the four projections' FLOPs): the output
  // product, half the core, where the CPU kernel's joint pass runs it
  // again (the adapter's query slots too: one core call for all of them).
  EXPECT_EQ(piece("embed.S/block0.attn").lean_rerun, 0.0);         // core 432 against 1152 (3 keys a query, width 4)
  EXPECT_EQ(piece("ae_local/block0.attn").lean_rerun, 160 / 2);    // core 160 against 1536
  EXPECT_EQ(piece("ae_adapter/block1.cross").lean_rerun, 96 / 2);  // core 96 against 1792
  EXPECT_EQ(piece("ae_global/block0.attn").lean_rerun, 1024 / 2);  // core 1024 against 8192
  EXPECT_EQ(piece("ae_aggregation/block0.attn").lean_rerun, 256 / 2);  // core 256 against 4096
  EXPECT_EQ(piece("pred.S/block0.cross").lean_rerun, 2 * 3 * 6 * 24);  // core 432 against 1216: kept
  EXPECT_EQ(piece("pred.S/block0.attn").lean_rerun, 2 * 3 * 6 * 24 + 80 / 2);  // core 80 against 384
  EXPECT_EQ(piece("pred.S/block0.mlp").lean_rerun, 2 * 3 * 6 * 24);
  EXPECT_EQ(piece("ae_global/block0.mlp").lean_rerun, 0.0);
  // A lean embed input's product, which a lean block 0 attention makes again.
  EXPECT_EQ(piece("embed.S/input").lean_rerun, 2 * 9 * 2 * 4);
  EXPECT_TRUE(piece("embed.S/input").lean_rerun_with_next);
  // The aggregation engine runs each sample's non-empty cells as one
  // call, and a lean layer decides per call: at width 16 a sample of 6
  // cells (6 keys a query, at most 8) runs its core again and one of 12
  // keeps it, though the two together (180 key pairs a query row of 18)
  // would not.
  FlopShape two = s;
  two.num_samples = 2, two.num_cells = 12, two.num_tokens = 18;
  two.source_cell_lens.assign(24, 0);
  for (size_t c = 0; c < 6; ++c) two.source_cell_lens[c] = 1;
  for (size_t c = 12; c < 24; ++c) two.source_cell_lens[c] = 1;
  two.streams = {{"S", 18, {std::vector<int64_t>(24, 0)}}};
  int found = 0;
  for (const PieceFlops& p : model_flops(o, two, CoreKernel::Cpu).pieces)
    if (p.key.str() == "ae_aggregation/block0.attn") {
      ++found;
      EXPECT_EQ(p.forward, 4 * 2 * 18 * 16 * 16 + 4 * (6 * 6 + 12 * 12) * 16);
      EXPECT_EQ(p.lean_rerun, 4 * 6 * 6 * 16 / 2);
    }
  EXPECT_EQ(found, 1);
  // The local engine 256 wide on 4096 tokens:
  // cells of 8 tokens make a core of 4·512·8²·256 FLOPs, far under a
  // quarter of the projections' 8·4096·256², so it runs again (its output
  // product, half the core: the joint pass computes the scores once);
  // cells of 256 make 4·16·256²·256, half of them, so its output is kept.
  for (const int64_t len : {8, 256}) {
    ModelOptions wide = o;
    wide.local = engine("ae_local", 256);
    FlopShape big = s;
    big.num_tokens = 4096;
    big.source_cell_lens.assign(size_t(4096 / len), len);
    big.num_cells = int64_t(big.source_cell_lens.size());
    const ModelFlops g = model_flops(wide, big, CoreKernel::Cpu);
    double lean = -1, lean_elsewhere = -1;
    for (const PieceFlops& p : g.pieces)
      if (p.key.str() == "ae_local/block0.attn") lean = p.lean_rerun;
    for (const PieceFlops& p : model_flops(wide, big, CoreKernel::Other).pieces)
      if (p.key.str() == "ae_local/block0.attn") lean_elsewhere = p.lean_rerun;
    EXPECT_EQ(lean, len == 8 ? 2.0 * 512 * 8 * 8 * 256 : 0.0) << "cells of " << len;
    EXPECT_EQ(lean_elsewhere, 2.0 * lean) << "cells of " << len;  // the whole core, forward and all
  }

  // Backward twice the forward; a recomputed piece's forward once more, but its last product.
  std::vector<PieceKey> keys;
  for (const PieceFlops& p : f.pieces) keys.push_back(p.key);
  RecomputePlan plan(keys);
  EXPECT_EQ(f.step(plan), 3 * 48744.0);
  // The attention cores a recomputation runs as one joint pass with their
  // backward (half a core less than a forward and a backward): every core
  // but block-local ones' (none here).
  EXPECT_EQ(piece("embed.S/block0.attn").joint_core, 3 * 4 * 3 * 3 * 4);
  EXPECT_EQ(piece("ae_local/block0.attn").joint_core, 4 * (2 * 2 + 1 * 1) * 8);
  EXPECT_EQ(piece("ae_adapter/block0.cross").joint_core, 96);
  EXPECT_EQ(piece("ae_global/block0.attn").joint_core, 4 * 4 * 4 * 16);  // 1024
  EXPECT_EQ(piece("pred.S/block0.cross").joint_core, 4 * (1 + 2) * 9 * 4);
  EXPECT_EQ(piece("pred.S/block0.attn").joint_core, 4 * (1 + 4) * 4);
  EXPECT_EQ(piece("pred.S/block0.mlp").joint_core, 0.0);
  // Block-local attention runs again under autograd: no joint pass.
  ModelOptions local_blocks = o;
  local_blocks.global.dense_rate = 0.5;  // block 0 dense, block 1 block-local
  local_blocks.global.num_blocks = 2;
  for (const PieceFlops& p : model_flops(local_blocks, s, CoreKernel::Cpu).pieces) {
    if (p.key.str() == "ae_global/block0.attn") EXPECT_EQ(p.joint_core, 1024.0);
    if (p.key.str() == "ae_global/block1.attn") EXPECT_EQ(p.joint_core, 0.0);
  }
  // Off the CPU kernel (CUDA) no core runs as a joint pass: a
  // recomputation runs every core's forward again.
  for (const PieceFlops& p : model_flops(o, s, CoreKernel::Other).pieces) {
    EXPECT_EQ(p.joint_core, 0.0) << p.key.str();
    EXPECT_EQ(p.forward, piece(p.key.str()).forward) << p.key.str();
  }
  plan.set(*PieceKey::parse("ae_global/block0.attn"), true);
  plan.set(*PieceKey::parse("ae_global/block0.mlp"), true);
  EXPECT_EQ(f.step(plan), 3 * 48744.0 + 17408 - 2048 - 4096 - 1024 / 2);
  // Lean pieces: what they run again once more.
  plan.set_mode(*PieceKey::parse("pred.S/block0.cross"), PieceMode::Lean);
  plan.set_mode(*PieceKey::parse("pred.S/block0.mlp"), PieceMode::Lean);
  plan.set_mode(*PieceKey::parse("ae_local/block0.attn"), PieceMode::Lean);
  EXPECT_EQ(f.step(plan), 3 * 48744.0 + 17408 - 2048 - 4096 - 1024 / 2 + 2 * (2 * 3 * 6 * 24) + 160 / 2);
  // A lean embed input runs its product again only where block 0's
  // attention, lean too, makes its output again.
  plan.set_mode(*PieceKey::parse("embed.S/input"), PieceMode::Lean);
  const double before = 3 * 48744.0 + 17408 - 2048 - 4096 - 1024 / 2 + 2 * (2 * 3 * 6 * 24) + 160 / 2;
  EXPECT_EQ(f.step(plan), before);
  plan.set_mode(*PieceKey::parse("embed.S/block0.attn"), PieceMode::Lean);
  EXPECT_EQ(f.step(plan), before + 2 * 9 * 2 * 4);
}

// The matrix products LibTorch's profiler counted in what ran under `profile`.
template <typename F>
double profiled_matmul_flops(F&& run) {
  using namespace torch::autograd::profiler;
  enableProfilerLegacy(ProfilerConfig(ProfilerState::CPU, /*report_input_shapes=*/true, false, false, /*with_flops=*/true));
  run();
  const thread_event_lists events = disableProfilerLegacy();
  double flops = 0;
  for (const auto& list : events)
    for (const LegacyEvent& e : list)
      for (const char* name : {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
        if (std::strcmp(e.name(), name) == 0) flops += double(const_cast<LegacyEvent&>(e).flops());
  return flops;
}

TEST(Flops, EqualTheProfilersCountOfARealForward) {
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant);
    Config c = testing::tiny_config();
    if (variant == 1) {  // two forecast steps, block-local global attention with a short last block
      c.training_mode = "forecast";
      c.forecast_policy = "fixed";
      c.forecast_steps = 2;
      c.ae_global_num_blocks = 3;  // block 1 block-local
      c.fe_num_blocks = 2;
      c.fe_num_heads = 2;
      c.ae_global_att_dense_rate = 0.5;
      c.ae_global_block_factor = 20;  // 48 cells: blocks of 20, 20 and 8
    }
    Dataset data(c, 0, 1);
    const ModelOptions options = model_options(c, data.stream_shapes());
    torch::manual_seed(c.seed);
    WeatherModel model(options);
    const ModelBatch batch = to_model_batch(data.batch(0), torch::kCPU);
    torch::NoGradGuard no_grad;
    const double profiled = [&] {
      const testing::ThreadCount one(1);  // the profiler records the calling thread
      return profiled_matmul_flops([&] { model->forward(batch); });
    }();
    const ModelFlops counted = model_flops(options, flop_shape(batch), CoreKernel::Cpu);
    EXPECT_EQ(batch.num_target_steps(), variant == 1 ? 3 : 1);
    EXPECT_GT(counted.forward(), 1e6);
    // The profiler does not count a matrix-vector product: the forecast
    // engine's AdaLayerNorm on its one step value (a few hundred FLOPs).
    EXPECT_NEAR(counted.forward(), profiled, 1e-4 * profiled);
  }
}

// What a recomputation runs again, as the profiler counts the products of
// a training step with every piece recomputed against one with none: the
// pieces' forwards without their last products and without half of each
// core the kernel runs as one joint pass with its backward, as the count
// says; and
// with every piece lean: what lean runs again (at this size the
// AdaLayerNorms' first products; no core is big enough, saving.h).
TEST(Flops, ARecomputationRunsAgainWhatTheCountSays) {
  Config c = testing::tiny_config();
  Dataset data(c, 0, 1);
  const ModelOptions options = model_options(c, data.stream_shapes());
  torch::manual_seed(c.seed);
  WeatherModel model(options);
  const ModelBatch batch = to_model_batch(data.batch(0), torch::kCPU);
  const auto step = [&] {
    const ModelOutput out = model->forward(batch);
    torch::Tensor loss = torch::zeros({});
    for (const auto& per_stream : out.preds)
      for (const torch::Tensor& p : per_stream)
        if (p.defined()) loss = loss + p.sum();
    loss.backward();
  };
  const testing::ThreadCount one(1);  // the profiler records the calling thread, which runs a CPU backward
  const double nothing_again = profiled_matmul_flops(step);
  RecomputePlan plan(model->piece_keys());
  for (int i = 0; i < plan.pieces_total(); ++i) plan.set(size_t(i), true);
  model->set_plan(plan);
  const double all_again = profiled_matmul_flops(step);
  Config selective = c;  // every block piece and read-out lean
  SectionRecompute lean_section;
  lean_section.set = true;
  lean_section.mode = RecomputeMode::Selective;
  for (const RecomputeSectionInfo& s : recompute_sections()) selective.gradient_checkpointing.*s.field = lean_section;
  RecomputePlan lean = resolve_plan(selective);
  model->set_plan(lean);
  const double lean_again = profiled_matmul_flops(step);
  const ModelFlops counted = model_flops(options, flop_shape(batch), CoreKernel::Cpu);
  double last_products = 0;
  for (const PieceFlops& p : counted.pieces) last_products += p.last_product;
  double joint_cores = 0;
  for (const PieceFlops& p : counted.pieces) joint_cores += p.joint_core;
  EXPECT_GT(last_products, 0.05 * counted.forward());  // far above the tolerance below: a rerun with them fails
  EXPECT_GT(0.5 * joint_cores, 1e-2 * counted.recomputed(plan));  // so does a rerun that runs every core's forward
  EXPECT_NEAR(all_again - nothing_again, counted.recomputed(plan), 1e-4 * counted.recomputed(plan));
  EXPECT_GT(lean.pieces_lean(), 0);
  EXPECT_GT(counted.recomputed(lean), 0.01 * counted.forward());  // far above the tolerance below
  EXPECT_NEAR(lean_again - nothing_again, counted.recomputed(lean), 1e-4 * counted.recomputed(lean));
}

// A lean attention layer whose core runs again (cells of 8 tokens, 8 keys
// a query against width 64: lean_reruns_core) adds, as the profiler counts
// it, its output product only (half the core: the joint pass computes the
// scores once), as the count has it (Flops.HandCountOfASmallModel); a
// recomputed one (Saving::All, then Saving::Rerun in backward) adds its
// projections but the output projection, and half its core: the rerun
// runs the core only in backward, as the joint pass. Varlen and dense
// self-attention, and cross-attention.
TEST(Flops, ALeanOrRecomputedCoreRunsAgainItsOutputProductOnly) {
  const int64_t d = 64, rows = 4096, len = 8, kv_len = 5, kv_dim = 32, kv_rows = rows / len * kv_len;
  AttentionOptions ao;
  ao.dim = d;
  ao.num_heads = 4;
  SelfAttention attn(ao);
  ao.dim_kv = kv_dim;
  CrossAttention cross(ao);
  AttentionOptions so = ao;  // the adapter's: two query slots a row, each with its own projection
  so.sliced_q = true;
  so.num_slices_q = 2;
  CrossAttention sliced(so);
  const VarlenSegments cells = VarlenSegments::from_lengths(std::vector<int64_t>(rows / len, len),
                                                            std::vector<int64_t>(rows / len, len), torch::kCPU);
  const VarlenSegments neighbours = VarlenSegments::from_lengths(std::vector<int64_t>(rows / len, len),
                                                                 std::vector<int64_t>(rows / len, kv_len), torch::kCPU);
  const torch::Tensor x = torch::randn({rows, d}).requires_grad_(true),
                      xd = torch::randn({rows / len, len, d}).requires_grad_(true),
                      kv = torch::randn({kv_rows, kv_dim}).requires_grad_(true),
                      xs = torch::randn({rows / len, 2, d}).requires_grad_(true);
  const VarlenSegments one_row = VarlenSegments::from_lengths(std::vector<int64_t>(rows / len, 1),
                                                              std::vector<int64_t>(rows / len, kv_len), torch::kCPU);
  std::vector<torch::Tensor> params = attn->parameters(), cross_params = cross->parameters(),
                             sliced_params = sliced->parameters();
  params.insert(params.end(), cross_params.begin(), cross_params.end());
  params.insert(params.end(), sliced_params.begin(), sliced_params.end());
  params.push_back(kv);
  using Layer = std::function<torch::Tensor(const torch::Tensor&, Saving)>;
  struct Case {
    const char* name;
    torch::Tensor input;
    Layer layer;
    double core, rerun_projections;  // q, k and v, not the output projection
  };
  const double self_projections = 3.0 * 2.0 * rows * d * d;
  const std::vector<Case> cases = {
      {"varlen", x, [&](const torch::Tensor& t, Saving s) { return attn->forward_varlen(t, cells, {}, s); },
       4.0 * rows * len * d, self_projections},
      {"dense", xd, [&](const torch::Tensor& t, Saving s) { return attn->forward(t, {}, s); }, 4.0 * rows * len * d,
       self_projections},
      {"cross", x, [&](const torch::Tensor& t, Saving s) { return cross->forward(t, kv, neighbours, {}, s); },
       4.0 * rows * kv_len * d, 2.0 * rows * d * d + 2.0 * kv_rows * kv_dim * 2 * d},
      {"query slots", xs, [&](const torch::Tensor& t, Saving s) { return sliced->forward(t, kv, one_row, {}, s); },
       4.0 * (rows / len) * 2 * kv_len * d, 2.0 * (rows / len) * 2 * d * d + 2.0 * kv_rows * kv_dim * 2 * d},
  };
  const testing::ThreadCount one(1);  // the profiler records the calling thread
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto profiled = [&](bool recompute, Saving s) {
      return profiled_matmul_flops([&] {
        const torch::Tensor y =
            recompute ? recomputed([&](const torch::Tensor& t) { return c.layer(t, Saving::All); }, c.input, params,
                                   [&](const torch::Tensor& t) { return c.layer(t, Saving::Rerun); })
                      : c.layer(c.input, s);
        y.sum().backward();
      });
    };
    const double all = profiled(false, Saving::All), lean = profiled(false, Saving::Lean),
                 again = profiled(true, Saving::All);
    EXPECT_NEAR(lean - all, 0.5 * c.core, 1e-6 * c.core);
    EXPECT_NEAR(again - all, c.rerun_projections + 0.5 * c.core, 1e-6 * c.core);
  }
}

}  // namespace
}  // namespace wg
