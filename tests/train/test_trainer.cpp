// The training loop: the loss falls, runs are reproducible, memory is
// measured, and non-finite losses follow nan_policy.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "../common/tiny_config.h"
#include "wg/config/recompute_sections.h"
#include "wg/model/flops.h"
#include "wg/model/model_batch.h"
#include "wg/model/model_options.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

using wg::testing::tiny_config;

Config training_config() {
  Config c = wg::testing::without_dropout(tiny_config());
  c.samples_per_mini_epoch = 160;  // 80 steps of batch 2
  c.lr.lr_steps_warmup = 5;
  c.lr.lr_steps_cooldown = 10;
  return c;
}

class RecordingSink : public MetricsSink {
 public:
  void on_step(const StepMetrics& m) override { steps.push_back(m); }
  void on_end(const RunSummary& s) override { summary = s; }
  std::vector<StepMetrics> steps;
  RunSummary summary;
};

double mean_loss(const std::vector<StepMetrics>& s, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += s[i].loss;
  return sum / double(to - from);
}

TEST(Trainer, ShortRunLossFalls) {
  install_counting_allocator();
  Config c = training_config();
  Trainer trainer(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  RecordingSink sink;
  const RunSummary s = trainer.train({&sink});
  ASSERT_EQ(s.steps, 80);
  ASSERT_EQ(sink.steps.size(), 80u);
  const double first = mean_loss(sink.steps, 0, 10), last = mean_loss(sink.steps, 70, 80);
  std::cout << "mean loss first 10 steps " << first << ", last 10 steps " << last << "\n";
  EXPECT_LT(last, 0.7 * first);
  EXPECT_GT(s.peak_bytes, 0);
  for (const auto& m : sink.steps) {
    EXPECT_GT(m.peak_bytes, 0);
    EXPECT_GT(m.activation_bytes, 0);
    EXPECT_GE(m.peak_bytes, m.activation_bytes);
    EXPECT_FALSE(m.skipped);
  }
}

TEST(Trainer, SameSeedSameLossesWithAndWithoutRecomputation) {
  Config c = tiny_config();  // dropout on
  c.samples_per_mini_epoch = 16;
  Trainer a(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  Config full = c;
  full.gradient_checkpointing = every_section(RecomputeMode::Full);
  Trainer b(full, Dataset(full, 0, 1), resolve_plan(full), torch::kCPU);
  for (int64_t k = 0; k < a.total_steps(); ++k) {
    torch::manual_seed(100 + k);
    const double la = a.step(k).loss;
    torch::manual_seed(100 + k);
    const double lb = b.step(k).loss;
    EXPECT_EQ(la, lb) << "step " << k;
  }
  auto pa = a.model()->parameters(), pb = b.model()->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
}

// A step's model FLOPs: three times the forward's, plus the forward of every
// recomputed piece; the peak given is the one MFU is measured against.
TEST(Trainer, StepCountsItsModelFlops) {
  Config c = tiny_config();
  c.samples_per_mini_epoch = 4;
  Config full = c;
  full.gradient_checkpointing = every_section(RecomputeMode::Full);
  Trainer a(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU), b(full, Dataset(full, 0, 1), resolve_plan(full), torch::kCPU);
  a.set_peak_flops(1e12);
  const BuiltBatch batch = a.dataset().batch(0);
  const ModelFlops counted =
      model_flops(model_options(c, a.dataset().stream_shapes()), flop_shape(to_model_batch(batch, torch::kCPU)),
                  CoreKernel::Cpu);
  const StepMetrics ma = a.step_on(batch, 0), mb = b.step_on(batch, 0);
  EXPECT_DOUBLE_EQ(ma.model_flops, 3 * counted.forward());
  double last_products = 0, joint_cores = 0;  // which a recomputation does not run again; half of which it does not
  for (const PieceFlops& p : counted.pieces) {
    last_products += p.last_product;
    joint_cores += p.joint_core;
  }
  EXPECT_GT(last_products, 0.0);
  EXPECT_GT(joint_cores, 0.0);
  EXPECT_DOUBLE_EQ(mb.model_flops, 4 * counted.forward() - counted.outside_pieces - last_products -
                                       0.5 * joint_cores);  // all recomputed
  EXPECT_EQ(ma.peak_flops, 1e12);
  EXPECT_GT(mfu(ma), 0.0);
  EXPECT_EQ(mb.peak_flops, 0.0);
}

// Batches prepared by loader workers train exactly like batches made in the
// step, also when the steps jump (a resume).
TEST(Trainer, SameLossesWithAndWithoutLoaderWorkers) {
  Config c = tiny_config();  // dropout on
  c.loader_num_workers = 0;
  Trainer a(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  c.loader_num_workers = 2;
  Trainer b(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  for (int64_t k : {0, 1, 2, 3, 9, 10}) {
    torch::manual_seed(100 + k);
    const StepMetrics ma = a.step(k);
    torch::manual_seed(100 + k);
    const StepMetrics mb = b.step(k);
    EXPECT_EQ(ma.loss, mb.loss) << "step " << k;
    EXPECT_GE(mb.data_seconds, 0);
    EXPECT_LE(mb.data_seconds, mb.step_seconds);
    EXPECT_EQ(mb.skipped_samples, 0);
  }
}

// Step 0's batch with a NaN in every stream's first source token: the
// predictions, and so the loss, become NaN (the pipeline itself zeroes NaN
// sources; this stands for a numerical blow-up).
BuiltBatch nan_batch(const Config& c) {
  BuiltBatch b = Dataset(c, 0, 1).batch(0);
  for (auto& sample : b.samples)
    for (auto& x : sample)
      if (!x.source_tokens.empty()) x.source_tokens[0] = std::nanf("");
  return b;
}

// Stream `stream` of the batch without a single target point.
void clear_targets(BuiltBatch& b, size_t stream) {
  for (auto& sample : b.samples)
    for (auto& t : sample[stream].targets) {
      t.values.clear();
      t.coords.clear();
      t.coords_raw.clear();
      t.times.clear();
      std::fill(t.cell_lens.begin(), t.cell_lens.end(), 0);
    }
  for (auto& step : b.layout.target_coords_idx[stream]) std::fill(step.begin(), step.end(), 0);
}

// Step 0's batch without a single target point.
BuiltBatch batch_without_targets(const Config& c) {
  BuiltBatch b = Dataset(c, 0, 1).batch(0);
  for (size_t stream = 0; stream < c.streams.size(); ++stream) clear_targets(b, stream);
  return b;
}

// A step where one stream has no targets: its target-side parameters
// (prediction head, target token engine, target coordinate embedding) get
// no gradient, and AdamW leaves them alone, weights and moments, as
// upstream's zero_grad(set_to_none) and torch's AdamW do; not a step with
// zero gradients, which would decay them and move them by their momentum.
TEST(Trainer, ParametersWithoutGradientInAStepAreLeftAlone) {
  Config c = tiny_config();
  c.samples_per_mini_epoch = 16;
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  ASSERT_FALSE(t.step(0).skipped);  // every parameter but dead ones gets a gradient and AdamW state
  BuiltBatch b = t.batch(1);
  const size_t synop = 1;
  ASSERT_EQ(c.streams[synop].name, "SYNOP");
  clear_targets(b, synop);
  std::map<std::string, torch::Tensor> before;
  for (const auto& p : t.model()->named_parameters()) before[p.key()] = p.value().detach().clone();
  ASSERT_FALSE(t.step_on(b, 1).skipped);
  int synop_target_side = 0, moved = 0;
  for (const auto& p : t.model()->named_parameters()) {
    const std::string& name = p.key();
    const bool target_side = name.rfind("pred_heads.SYNOP", 0) == 0 ||
                             name.rfind("target_token_engines.SYNOP", 0) == 0 ||
                             name.rfind("embed_target_coords.SYNOP", 0) == 0;
    if (target_side) {
      ++synop_target_side;
      EXPECT_TRUE(torch::equal(p.value(), before[name])) << name << " moved without a gradient";
    } else if (!torch::equal(p.value(), before[name])) {
      ++moved;
    }
  }
  EXPECT_GT(synop_target_side, 0);
  EXPECT_GT(moved, 0);
}

TEST(Trainer, NonFiniteLossStopsUnderPolicyError) {
  Config c = tiny_config();
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  EXPECT_THROW(t.step_on(nan_batch(c), 0), NonFiniteLossError);
}

TEST(Trainer, NonFiniteLossIsSkippedUnderPolicySkipThenStops) {
  Config c = tiny_config();
  c.nan_policy = NanPolicy::Skip;
  c.max_consecutive_nan_skips = 3;
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  const auto before = t.model()->parameters()[0].clone();
  const BuiltBatch bad = nan_batch(c);
  EXPECT_TRUE(t.step_on(bad, 0).skipped);
  EXPECT_TRUE(torch::equal(before, t.model()->parameters()[0]));  // no update
  EXPECT_FALSE(t.step(1).skipped);                                // a good step resets the count
  EXPECT_TRUE(t.step_on(bad, 2).skipped);
  EXPECT_TRUE(t.step_on(bad, 3).skipped);
  EXPECT_THROW(t.step_on(bad, 4), NonFiniteLossError);
}

// A finite loss whose gradient is not finite: upstream's GradScaler skips
// the optimizer step (wg-model.md §10.4); here nan_policy decides, as for a
// non-finite loss. A hook makes one parameter's gradient infinite.
TEST(Trainer, ANonFiniteGradientFollowsNanPolicy) {
  for (const NanPolicy policy : {NanPolicy::Error, NanPolicy::Skip}) {
    Config c = tiny_config();
    c.nan_policy = policy;
    c.max_consecutive_nan_skips = 2;
    Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
    torch::Tensor p = t.model()->parameters()[0];
    const auto before = p.detach().clone();
    const unsigned hook = p.register_hook([](torch::Tensor g) { return torch::full_like(g, INFINITY); });
    if (policy == NanPolicy::Error) {
      std::string what;
      try {
        t.step(0);
      } catch (const NonFiniteLossError& e) {
        what = e.what();
      }
      EXPECT_NE(what.find("non-finite gradient norm (inf"), std::string::npos) << what;
      continue;
    }
    const StepMetrics m = t.step(0);
    EXPECT_TRUE(m.skipped);
    EXPECT_TRUE(m.nonfinite_grad);
    EXPECT_FALSE(m.nonfinite_loss);
    EXPECT_TRUE(std::isfinite(m.loss));
    EXPECT_TRUE(torch::equal(before, p));
    EXPECT_TRUE(t.optimizer().state().empty());  // no parameter stepped
    p.remove_hook(hook);
    const StepMetrics good = t.step(1);  // resets the count of skips in a row
    EXPECT_FALSE(good.skipped);
    EXPECT_FALSE(good.nonfinite_grad);
    EXPECT_FALSE(torch::equal(before, p));
    p.register_hook([](torch::Tensor g) { return torch::full_like(g, NAN); });
    EXPECT_TRUE(t.step(2).skipped);
    EXPECT_THROW(t.step(3), NonFiniteLossError);  // the second in a row
  }
}

// Loss scaling (upstream's GradScaler; auto under float16 autocast, here
// forced on the CPU): backward sees gradients 2^16 times larger, the step
// is bit for bit the unscaled one's (a power of two is exact), and the loss
// and gradient norm are reported unscaled.
TEST(Trainer, LossScalingChangesNoBitOfAStep) {
  Config off = tiny_config();
  off.loss_scaling = "off";
  Config on = off;
  on.loss_scaling = "on";
  Trainer a(off, Dataset(off, 0, 1), resolve_plan(off), torch::kCPU);
  Trainer b(on, Dataset(on, 0, 1), resolve_plan(on), torch::kCPU);
  ASSERT_FALSE(a.loss_scaler().enabled());
  ASSERT_TRUE(b.loss_scaler().enabled());
  double seen[2] = {0, 0};
  a.model()->parameters()[0].register_hook([&](torch::Tensor g) { seen[0] = g.abs().max().item<double>(); });
  b.model()->parameters()[0].register_hook([&](torch::Tensor g) { seen[1] = g.abs().max().item<double>(); });
  for (int64_t k = 0; k < 3; ++k) {
    torch::manual_seed(k);
    const StepMetrics ma = a.step(k);
    torch::manual_seed(k);
    const StepMetrics mb = b.step(k);
    EXPECT_EQ(ma.loss_scale, 1.0);
    EXPECT_EQ(mb.loss_scale, 65536.0);
    EXPECT_EQ(ma.loss, mb.loss) << "step " << k;
    EXPECT_EQ(ma.grad_norm, mb.grad_norm) << "step " << k;
    ASSERT_GT(seen[0], 0.0);
    EXPECT_EQ(seen[1], seen[0] * 65536.0) << "step " << k;
  }
  const auto pa = a.model()->parameters(), pb = b.model()->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
}

// Under loss scaling a non-finite gradient is an overflow at that scale: the
// step is skipped and the scale halves, whatever nan_policy says, until the
// scale falls below float16's smallest subnormal (then an error).
TEST(Trainer, UnderLossScalingANonFiniteGradientBacksOffThenStops) {
  Config c = tiny_config();  // nan_policy error
  c.loss_scaling = "on";
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  torch::Tensor p = t.model()->parameters()[0];
  const auto before = p.detach().clone();
  const unsigned hook = p.register_hook([](torch::Tensor g) { return torch::full_like(g, INFINITY); });
  const StepMetrics m = t.step(0);
  EXPECT_TRUE(m.skipped);
  EXPECT_TRUE(m.nonfinite_grad);
  EXPECT_EQ(m.loss_scale, 65536.0);
  EXPECT_EQ(t.loss_scaler().scale(), 32768.0);
  EXPECT_TRUE(torch::equal(before, p));
  p.remove_hook(hook);
  const StepMetrics good = t.step(1);
  EXPECT_FALSE(good.skipped);
  EXPECT_EQ(good.loss_scale, 32768.0);
  EXPECT_EQ(t.loss_scaler().growth_tracker(), 1);
  EXPECT_FALSE(torch::equal(before, p));
  // A step without target data runs no backward: the scaler stays (upstream
  // backs off on the NaN gradients of its NaN loss).
  const StepMetrics empty = t.step_on(batch_without_targets(c), 2);
  EXPECT_TRUE(empty.skipped);
  EXPECT_EQ(empty.loss_scale, 32768.0);  // the scale in force, also without a backward
  EXPECT_EQ(t.loss_scaler().scale(), 32768.0);
  EXPECT_EQ(t.loss_scaler().growth_tracker(), 1);
  t.loss_scaler().restore(std::ldexp(1.0, -23), 0);
  p.register_hook([](torch::Tensor g) { return torch::full_like(g, NAN); });
  EXPECT_TRUE(t.step(3).skipped);  // down to 2^-24
  std::string what;
  try {
    t.step(4);
  } catch (const NonFiniteLossError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("not finite at any scale"), std::string::npos) << what;
}

// Every stream's coordinate embedding diverged (NaN weights): each stream's
// prediction is dropped as upstream drops it, and the step is a non-finite
// loss under nan_policy, not a batch without targets.
TEST(Trainer, ADivergedCoordinateEmbeddingIsANonFiniteLoss) {
  Config c = tiny_config();  // nan_policy error
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  int poisoned = 0;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : t.model()->named_parameters())
      if (p.key().rfind("embed_target_coords.", 0) == 0)
        p.value().fill_(std::numeric_limits<float>::quiet_NaN()), ++poisoned;
  }
  ASSERT_GT(poisoned, 0);
  EXPECT_THROW(t.step(0), NonFiniteLossError);
}

// grad_clip 0 means no clipping (upstream's clip_grad_norm_(max_norm=0)
// would zero every gradient, docs/upstream-differences.md): the step of
// an unreachable bound.
TEST(Trainer, ClipZeroMeansNoClipping) {
  Config zero = tiny_config(), none = tiny_config();
  zero.grad_clip = 0;
  none.grad_clip = 1e30;
  Trainer a(zero, Dataset(zero, 0, 1), resolve_plan(zero), torch::kCPU);
  Trainer b(none, Dataset(none, 0, 1), resolve_plan(none), torch::kCPU);
  const auto before = a.model()->parameters()[0].detach().clone();
  torch::manual_seed(3);
  const StepMetrics ma = a.step(0);
  torch::manual_seed(3);
  b.step(0);
  EXPECT_GT(ma.grad_norm, 0);
  EXPECT_FALSE(torch::equal(a.model()->parameters()[0], before));
  const auto pa = a.model()->parameters(), pb = b.model()->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
}

// Upstream divides by zero streams with data and its gradient scaler skips
// the optimizer step; here the step is skipped explicitly, not counted as a
// non-finite loss, and the schedule and the weight average still advance.
TEST(Trainer, AStepWithoutTargetsIsSkippedNotAnError) {
  Config c = tiny_config();  // nan_policy error
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  const auto before = t.model()->parameters()[0].clone();
  const StepMetrics m = t.step_on(batch_without_targets(c), 0);
  EXPECT_TRUE(m.skipped);
  EXPECT_FALSE(m.nonfinite_loss);
  EXPECT_TRUE(torch::equal(before, t.model()->parameters()[0]));
  EXPECT_FALSE(t.step(1).skipped);
}

// validate_with_ema: validation runs on the weight average, and training is
// the same with and without it.
TEST(Trainer, ValidationUsesTheWeightAverage) {
  Config c = training_config();
  c.samples_per_mini_epoch = 40;
  c.samples_per_validation = 4;
  c.start_date_val = 1583020800;  // 2020-03-01
  c.end_date_val = 1583625600;
  Config plain = c;
  plain.validate_with_ema = false;
  Trainer a(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU), b(plain, Dataset(plain, 0, 1), resolve_plan(plain), torch::kCPU);
  ASSERT_NE(a.weight_average(), nullptr);
  EXPECT_EQ(b.weight_average(), nullptr);
  for (int64_t k = 0; k < 15; ++k) {  // the same dropout draws (the decoder's fixed 0.1) for both
    torch::manual_seed(100 + k);
    const double la = a.step(k).loss;
    torch::manual_seed(100 + k);
    EXPECT_EQ(la, b.step(k).loss) << "step " << k;
  }
  const auto live = a.model()->parameters()[3].clone();
  const double va = a.validate(), vb = b.validate();
  EXPECT_TRUE(std::isfinite(va));
  EXPECT_NE(va, vb);  // after step 12, β = 0.5: the average is not the live weights
  EXPECT_TRUE(torch::equal(live, a.model()->parameters()[3]));  // swapped back
  // after a step: β·previous + (1 − β)·live, β = 0.5^(N / 1) = 0.25 for N = 2 samples per step
  const double beta = ema_beta(15, 2, c.ema_halflife_in_thousands, c.ema_ramp_up_ratio);
  EXPECT_DOUBLE_EQ(beta, 0.25);
  std::vector<torch::Tensor> prev;
  for (const auto& p : a.weight_average()->averaged()) prev.push_back(p.clone());
  a.step(15);
  const auto params = a.model()->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(torch::allclose(a.weight_average()->averaged()[i], beta * prev[i] + (1 - beta) * params[i], 1e-6, 1e-7))
        << i;
}

}  // namespace
}  // namespace wg
