// The automatic plan on CPU, with the counting allocator as the "device":
// for budgets between the all-recompute and the no-recompute peak the
// measured step peak stays within the budget and the prediction is within
// 10% of it; the out-of-memory fallback retries a step with one more piece
// recomputed and gets the same result as a run that had memory enough.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../common/tiny_config.h"
#include "wg/plan/auto_plan.h"
#include "wg/plan/cost_profile.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

Config planner_config() {
  Config c = wg::testing::without_dropout(wg::testing::tiny_config());
  c.batch_size_per_gpu = 4;
  c.samples_per_mini_epoch = 64;
  for (auto& s : c.streams) {
    s.synthetic.grid_lat = 6;
    s.synthetic.grid_lon = 8;
    s.embed.dim_embed = 32;
  }
  return c;
}

RecomputePlan all_or_nothing(const Config& c, bool on) {
  RecomputePlan p = resolve_plan(c);
  for (size_t i = 0; i < p.size(); ++i) p.set(i, on);
  return p;
}

// The largest step peak after the first step (optimizer state allocated).
int64_t steady_peak(Trainer& t, int steps = 3) {
  int64_t peak = 0;
  for (int k = 0; k < steps; ++k) {
    const int64_t p = t.step(k).peak_bytes;
    if (k > 0) peak = std::max(peak, p);
  }
  return peak;
}

int64_t measured_peak_with(const Config& c, bool all) {
  Trainer t(c, Dataset(c, 0, 1), all_or_nothing(c, all), torch::kCPU);
  return steady_peak(t);
}

// The planner profiles the batch with the most tokens of the first eight
// (here not step 0's).
TEST(AutoPlan, ProfilesTheBatchWithTheMostTokensOfTheFirstEight) {
  const Config c = planner_config();
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  ASSERT_GE(t.total_steps(), Trainer::kPlanningBatches + 1);
  int64_t most = 0;
  for (int64_t i = 0; i < Trainer::kPlanningBatches; ++i) most = std::max(most, token_count(t.batch(i)));
  EXPECT_GT(most, token_count(t.batch(0)));
  int64_t first = -1;  // the first of equals
  for (int64_t i = 0; first < 0; ++i)
    if (token_count(t.batch(i)) == most) first = i;
  EXPECT_EQ(t.planning_step(), first);
  EXPECT_EQ(t.planning_batch().sample_ids, t.batch(first).sample_ids);
  // Fewer batches than eight: the most tokens of those there are.
  Config few = c;
  few.samples_per_mini_epoch = 3 * c.batch_size_per_gpu;
  few.num_mini_epochs = 1;
  Trainer small(few, Dataset(few, 0, 1), resolve_plan(few), torch::kCPU);
  ASSERT_LT(small.total_steps(), Trainer::kPlanningBatches);
  int64_t best = 0;
  for (int64_t i = 1; i < small.total_steps(); ++i)
    if (token_count(small.batch(i)) > token_count(small.batch(best))) best = i;
  EXPECT_EQ(small.planning_step(), best);
}

TEST(AutoPlan, StaysWithinTheBudgetAndPredictsThePeakWithin10Percent) {
  install_counting_allocator();
  at::set_num_threads(1);
  const Config c = planner_config();
  const int64_t none = measured_peak_with(c, false), all = measured_peak_with(c, true);
  std::cout << "measured step peak: nothing recomputed " << none << " bytes, everything " << all << " bytes\n";
  ASSERT_LT(all, none * 3 / 4);
  for (double f : {0.1, 0.35, 0.6, 0.85}) {
    const int64_t budget = all + int64_t(f * double(none - all));
    Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
    const AutoPlan a = apply_auto_plan(t, budget, RankPlan{t.plan()}, c.auto_plan.oom_max_retries);
    const int64_t measured = steady_peak(t);
    std::cout << "budget " << budget << ": plan " << a.plan.summary() << ", predicted " << a.predicted_peak_bytes
              << ", checked on the batches it was planned from " << a.checked_peak_bytes << " (" << a.replans
              << " plans made again), measured " << measured << "\n";
    EXPECT_LE(a.checked_peak_bytes, budget) << "f " << f;
    EXPECT_LE(measured, budget) << "f " << f;
    EXPECT_NEAR(double(a.predicted_peak_bytes), double(measured), 0.10 * double(measured)) << "f " << f;
    EXPECT_GT(a.plan.pieces_recomputed() + a.plan.pieces_lean(), 0);
    EXPECT_EQ(t.plan().summary(), a.plan.summary());  // applied to the trainer
  }
}

TEST(AutoPlan, CostsAreMeasuredForEveryPiece) {
  install_counting_allocator();
  const Config c = planner_config();
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  const auto before = t.model()->parameters()[0].clone();
  TrainerProbe probe(t);
  const CostModel m = profile_costs(probe);
  EXPECT_TRUE(torch::equal(before, t.model()->parameters()[0]));  // profiling does not train
  ASSERT_EQ(m.pieces.size(), t.plan().size());
  for (const auto& p : m.pieces) {
    EXPECT_GT(p.retained_bytes, 0) << p.key.str();
    EXPECT_GE(p.retained_bytes, p.output_bytes) << p.key.str();
    EXPECT_GT(p.forward_seconds, 0) << p.key.str();
    EXPECT_GT(p.analytic_bytes, 0) << p.key.str();
    // A block piece's recomputation leaves out its last product; the others run again whole.
    if (p.key.in_a_block()) {
      EXPECT_GT(p.rerun_share, 0.3) << p.key.str();
      EXPECT_LT(p.rerun_share, 1.0) << p.key.str();
    } else {
      EXPECT_EQ(p.rerun_share, 1.0) << p.key.str();
    }
    // Lean: measured where the piece can run lean, keeping no more than kept.
    EXPECT_EQ(p.can_run_lean(), runs_lean(p.key)) << p.key.str();
    EXPECT_EQ(p.lean_with_next, p.key.section == "embed" && p.key.kind == PieceKind::Input) << p.key.str();
    if (p.can_run_lean()) {
      EXPECT_LE(p.lean_bytes, p.retained_bytes) << p.key.str();
      EXPECT_GE(p.lean_share, 0.0) << p.key.str();
      EXPECT_LE(p.lean_share, p.rerun_share) << p.key.str();  // an embed's input: its product made again
    }
  }
  EXPECT_GT(m.activations_none_bytes, 0);
  // Gradients: every piece here has parameters, and the pieces' are among the model's.
  int64_t gradients = 0, parameters = 0;
  for (const auto& p : m.pieces) {
    EXPECT_GT(p.gradient_bytes, 0) << p.key.str();
    gradients += p.gradient_bytes;
  }
  for (const auto& p : t.model()->parameters()) parameters += p.numel() * int64_t(p.element_size());
  EXPECT_LE(gradients, parameters);
  EXPECT_GT(gradients, parameters / 2);
  // Every piece that can run lean lean: between everything recomputed and nothing, as the model says within 10 %.
  EXPECT_LT(m.activations_lean_bytes, m.activations_none_bytes);
  EXPECT_GT(m.activations_lean_bytes, m.activations_all_bytes);
  const int64_t predicted = m.peak(m.all(PieceMode::Lean)) - m.base_bytes;
  EXPECT_NEAR(double(predicted), double(m.activations_lean_bytes), 0.10 * double(m.activations_lean_bytes));
  EXPECT_GE(m.lean_seconds_per_byte, 0.0);
}

TEST(AutoPlan, BudgetBelowTheAllRecomputePeakIsAClearError) {
  install_counting_allocator();
  const Config c = planner_config();
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  try {
    apply_auto_plan(t, 1000, RankPlan{t.plan()}, c.auto_plan.oom_max_retries);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("memory budget of 1000 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("every piece recomputed"), std::string::npos) << e.what();
  }
}

TEST(AutoPlan, PerNodeRuleSectionsKeepTheirSettings) {
  install_counting_allocator();
  const Config c = planner_config();
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  RankPlan rule{t.plan()};
  for (size_t i = 0; i < rule.plan.size(); ++i)
    if (rule.plan.pieces()[i].section == "ae_global") rule.plan.set(i, true);  // a rule recomputes the whole global engine
  rule.rule_sections = {"ae_global"};
  const AutoPlan a = apply_auto_plan(t, int64_t(1) << 40, rule, c.auto_plan.oom_max_retries);  // everything fits
  for (const auto& k : a.plan.pieces()) EXPECT_EQ(a.plan.get(k), k.section == "ae_global") << k.str();
}

struct LimitGuard {
  explicit LimitGuard(int64_t bytes) { set_cpu_memory_limit(bytes); }
  ~LimitGuard() { set_cpu_memory_limit(0); }
};

// The planner's check on the batches it chose from: a batch that runs out
// of memory gives -1, and leaves nothing of its graph held (a later check
// measures what it measured before).
TEST(AutoPlan, ACheckThatRunsOutOfMemoryReleasesItsGraph) {
  install_counting_allocator();
  const Config c = planner_config();
  Trainer t(c, Dataset(c, 0, 1), all_or_nothing(c, false), torch::kCPU);
  t.step(0);  // optimizer state allocated
  const std::vector<BuiltBatch> batches = t.planning_candidates();
  ASSERT_EQ(int64_t(batches.size()), Trainer::kPlanningBatches);
  const int64_t highest = t.probe_peak_or_oom(batches);
  ASSERT_GT(highest, 0);
  const int64_t held = memory_snapshot("cpu").current_bytes;
  {
    LimitGuard limit(held + highest - highest / 50);  // runs out in backward, near its peak
    EXPECT_EQ(t.probe_peak_or_oom(batches), -1);
  }
  EXPECT_EQ(memory_snapshot("cpu").current_bytes, held);
  EXPECT_EQ(t.probe_peak_or_oom(batches), highest);
}

TEST(OomFallback, RetryWithOneMorePieceGivesTheSameStep) {
  install_counting_allocator();
  const Config c = planner_config();
  std::vector<torch::Tensor> reference;
  {
    Trainer t(c, Dataset(c, 0, 1), all_or_nothing(c, false), torch::kCPU);
    t.step(0);
    t.step(1);
    for (const auto& p : t.model()->parameters()) reference.push_back(p.clone());
  }
  const int64_t none = measured_peak_with(c, false), all = measured_peak_with(c, true);
  Config retrying = c;
  retrying.auto_plan.oom_max_retries = 16;  // a manual plan has no measured costs: attention pieces in order
  Trainer t(retrying, Dataset(retrying, 0, 1), all_or_nothing(c, false), torch::kCPU);
  t.step(0);  // optimizer state allocated with memory to spare
  StepMetrics m;
  {
    LimitGuard limit(all + (none - all) * 3 / 4);  // too small for nothing recomputed
    m = t.step(1);
  }
  EXPECT_GT(m.oom_retries, 0);
  EXPECT_EQ(t.oom_events(), m.oom_retries);
  EXPECT_GT(t.plan().pieces_recomputed(), 0);
  auto params = t.model()->parameters();
  ASSERT_EQ(params.size(), reference.size());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], reference[i])) << i;
}

TEST(OomFallback, GivesUpAfterOomMaxRetriesNamingTheSmallestPlanTried) {
  install_counting_allocator();
  Config c = planner_config();
  c.auto_plan.oom_max_retries = 2;
  Trainer t(c, Dataset(c, 0, 1), all_or_nothing(c, false), torch::kCPU);
  t.step(0);
  LimitGuard limit(memory_snapshot("cpu").current_bytes + 256 * 1024);  // the input fits (~100 KiB), no forward does
  try {
    t.step(1);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory in step 1 after 3 attempts (oom_max_retries 2)"), std::string::npos) << m;
    EXPECT_NE(m.find("smallest plan tried: embed 2/"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace wg
