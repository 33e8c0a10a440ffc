// The training loop: the loss falls, runs are reproducible, memory is
// measured, and non-finite losses follow nan_policy.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <numeric>

#include "../common/tiny_config.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

using wg::testing::tiny_config;

Config training_config() {
  Config c = tiny_config();
  c.embed_dropout_rate = 0.0;
  c.ae_global_dropout_rate = 0.0;
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
  full.gradient_checkpointing.embed.mode = RecomputeMode::Full;
  full.gradient_checkpointing.latent.mode = RecomputeMode::Full;
  full.gradient_checkpointing.pred.mode = RecomputeMode::Full;
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

Batch nan_batch(const Config& c) {
  Batch b = Dataset(c, 0, 1).batch(0);
  for (auto& sb : b.streams)
    for (size_t t = 0; t < sb.masked.size(); ++t)
      if (sb.masked[t]) sb.values[t * sb.token_size * sb.channels] = std::nanf("");
  return b;
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
  const Batch bad = nan_batch(c);
  EXPECT_TRUE(t.step_on(bad, 0).skipped);
  EXPECT_TRUE(torch::equal(before, t.model()->parameters()[0]));  // no update
  EXPECT_FALSE(t.step(1).skipped);                                // a good step resets the count
  EXPECT_TRUE(t.step_on(bad, 2).skipped);
  EXPECT_TRUE(t.step_on(bad, 3).skipped);
  EXPECT_THROW(t.step_on(bad, 4), NonFiniteLossError);
}

}  // namespace
}  // namespace wg
