// Upstream's learning-rate schedule, β1 and EMA, value for value
// (wg-model.md §10.3 table, Appendix B item 5): the default run (1 GPU,
// B = 1: 131,072 steps, warm-up 512, cool-down 512).
#include <gtest/gtest.h>

#include <cmath>

#include "wg/train/ema.h"
#include "wg/train/lr_schedule.h"

namespace wg {
namespace {

constexpr double kPi = 3.14159265358979323846;

LrConfig upstream() { return LrConfig{}; }  // the defaults are upstream's

TEST(LrSchedule, UpstreamsDefaultRunStepByStep) {
  const LrSchedule s(upstream(), 131072, 1);
  EXPECT_EQ(s.phases().warmup, 512);
  EXPECT_EQ(s.phases().decay, 130048);
  EXPECT_EQ(s.phases().cooldown, 512);
  const double lr_max = 5e-5, lr_start = 1e-6;
  // step 0: lr_start² / lr_max' (the cool-down LinearLR's construction)
  EXPECT_NEAR(s.at(0), lr_start * lr_start / lr_max, 1e-20);
  EXPECT_DOUBLE_EQ(s.beta1_at(0), 0.95);
  // steps 1 … 511: OneCycleLR's cosine from lr_start to lr_max over 511 steps
  for (int t : {1, 100, 255, 400, 511}) {
    const double want = lr_max + (lr_start - lr_max) * (1 + std::cos(kPi * t / 511.0)) / 2;
    EXPECT_NEAR(s.at(t), want, 1e-12 * lr_max) << "step " << t;
    EXPECT_NEAR(s.beta1_at(t), 0.85 + 0.05 * (1 + std::cos(kPi * t / 511.0)), 1e-12) << "step " << t;
  }
  // 512, 513: OneCycle's second phase at its very start: ≈ lr_max; then constant
  for (int t : {512, 513}) EXPECT_NEAR(s.at(t), lr_max, 1e-9 * lr_max) << "step " << t;
  for (int t : {514, 60000, 130561}) {
    EXPECT_DOUBLE_EQ(s.at(t), lr_max) << "step " << t;
    EXPECT_NEAR(s.beta1_at(t), 0.85, 1e-9) << "step " << t;  // frozen: OneCycle is not stepped again
  }
  // cool-down: chained LinearLR from lr_max down towards 0
  for (int t : {130562, 130800, 131071}) {
    const double want = lr_max * (1.0 - double(t - 130561) / 512.0);
    EXPECT_NEAR(s.at(t), want, 1e-12 * lr_max) << "step " << t;
  }
}

// The cool-down ends at lr_max' · e / s (s = lr_start / lr_max',
// e = lr_final / lr_final_decay), as upstream's chained LinearLR does, not
// at lr_final: with e = s (lr_start 1e-4, lr_max 1e-3, lr_final_decay 1e-4,
// lr_final 1e-5, as the CPU configs had it until 887826c) the lr stays at
// lr_max. A cool-down that rises or stays is kept as upstream has it, with
// a warning (cooldown_warning), whatever the decay before it; one that
// falls has none.
TEST(LrSchedule, CoolDownEndsWhereUpstreamsChainedLinearLrEnds) {
  LrConfig c = upstream();
  c.lr_start = 1e-4;
  c.lr_max = 1e-3;
  c.lr_final_decay = 1e-4;
  c.lr_final = 1e-5;
  c.lr_steps_warmup = 8;
  c.lr_steps_cooldown = 16;
  const LrSchedule flat(c, 80, 1);
  for (int t : {64, 70, 79}) EXPECT_NEAR(flat.at(t), 1e-3, 1e-15) << "step " << t;
  c.lr_final = 1e-6;  // e = 0.01, s = 0.1: the lr falls towards lr_max · 0.1
  const LrSchedule falls(c, 80, 1);
  EXPECT_LT(falls.at(79), falls.at(70));
  EXPECT_LT(falls.at(70), 1e-3);
  EXPECT_GT(falls.at(79), 1e-4);
  EXPECT_NE(flat.cooldown_warning().find("keeps the learning rate at 0.001 over the run's last 14 steps"),
            std::string::npos)
      << flat.cooldown_warning();
  EXPECT_EQ(falls.cooldown_warning(), "");
  EXPECT_EQ(LrSchedule(upstream(), 131072, 1).cooldown_warning(), "");
  // κ = 2 scales lr_max (sqrt) but not lr_start or lr_final: with the flat run's values the lr now
  // rises, from lr_max' = 1.414e-3 towards 2e-3, and the warning names where lr_final must go.
  c.lr_final = 1e-5;
  const LrSchedule rises(c, 80, 2);
  EXPECT_GT(rises.at(79), rises.at(64));
  EXPECT_NE(rises.cooldown_warning().find("raises the learning rate from 0.001414 to 0.001"), std::string::npos)
      << rises.cooldown_warning();
  EXPECT_NE(rises.cooldown_warning().find("set lr_final below 7.071e-06"), std::string::npos)
      << rises.cooldown_warning();
  // After a cosine decay the lr the cool-down starts from is not lr_max', but the factor is the same.
  c.lr_policy_decay = "cosine";
  EXPECT_NE(LrSchedule(c, 80, 2).cooldown_warning(), "");
  c.lr_final = 1e-5 / std::sqrt(2.0);  // e = s at κ = 2: flat (the OneCycle's last step lifts it a little)
  EXPECT_NE(LrSchedule(c, 80, 2).cooldown_warning().find("keeps the learning rate"), std::string::npos);
  c.lr_final = 0.99e-5 / std::sqrt(2.0);  // falls, by 1 %: no warning
  EXPECT_EQ(LrSchedule(c, 80, 2).cooldown_warning(), "");
  c.lr_policy_decay = "linear";
  c.lr_final = 1e-5;
  EXPECT_NE(LrSchedule(c, 80, 2).cooldown_warning(), "");
}

TEST(LrSchedule, ScalingWithBatchTimesRanks) {
  LrConfig c = upstream();
  const LrSchedule sqrt4(c, 131072, 4);  // κ = 4: lr_max' = 2 lr_max
  EXPECT_DOUBLE_EQ(sqrt4.scale(), 2.0);
  EXPECT_DOUBLE_EQ(sqrt4.at(60000), 1e-4);
  c.lr_scaling_policy = "linear";
  EXPECT_DOUBLE_EQ(LrSchedule(c, 131072, 4).at(60000), 2e-4);
  c.lr_scaling_policy = "const";
  EXPECT_DOUBLE_EQ(LrSchedule(c, 131072, 4).at(60000), 5e-5);
  c.lr_scaling_policy = "none";
  EXPECT_THROW(LrSchedule(c, 131072, 4), std::invalid_argument);
}

TEST(LrSchedule, ShortRunsTakeUpstreamsAdjustment) {
  // decay below 20% of the run: warm-up 10%, cool-down 5%
  const LrPhases p = lr_phases(upstream(), 1000);
  EXPECT_EQ(p.warmup, 100);
  EXPECT_EQ(p.cooldown, 50);
  EXPECT_EQ(p.decay, 850);
  const LrSchedule s(upstream(), 1000, 1);
  EXPECT_DOUBLE_EQ(s.at(500), 5e-5);
  // tiny runs: no warm-up step at all, or one; upstream raises in both, here the lr stays finite
  for (int64_t total : {4, 12}) {
    const LrSchedule t(upstream(), total, 1);
    for (int64_t k = 0; k < total; ++k) EXPECT_TRUE(std::isfinite(t.at(k)) && t.at(k) >= 0) << total << " " << k;
  }
}

TEST(LrSchedule, OtherPolicies) {
  LrConfig c = upstream();
  c.lr_policy_warmup = "linear";  // errata 1: rises from lr_start·s² to lr_start·s, s = lr_start / lr_max'
  const LrSchedule lin(c, 131072, 1);
  const double s = 1e-6 / 5e-5;
  EXPECT_NEAR(lin.at(0), 1e-6 * s * s, 1e-22);
  EXPECT_NEAR(lin.at(511), 1e-6 * s * (1.0 / 512.0 * 511.0 + s * (1.0 - 511.0 / 512.0)), 1e-15);
  EXPECT_DOUBLE_EQ(lin.beta1_at(100), 0.975);  // no OneCycle: AdamW's κ-based β1 stays
  c = upstream();
  c.lr_policy_decay = "cosine";  // the same OneCycle down to its min_lr
  const LrSchedule cos(c, 131072, 1);
  EXPECT_LT(cos.at(100000), 5e-5);
  EXPECT_GT(cos.at(100000), cos.at(120000));
  c.lr_policy_warmup = "linear";
  EXPECT_THROW(LrSchedule(c, 131072, 1), std::invalid_argument);  // cosine decay needs cosine warm-up
}

TEST(AdamConstants, FromBatchTimesRanks) {
  const AdamConstants one = adam_constants(1);
  EXPECT_DOUBLE_EQ(one.beta1, 0.975);
  EXPECT_DOUBLE_EQ(one.beta2, 0.9875);
  EXPECT_DOUBLE_EQ(one.eps, 2e-8);
  const AdamConstants many = adam_constants(64);
  EXPECT_DOUBLE_EQ(many.beta1, 0.5);
  EXPECT_DOUBLE_EQ(many.beta2, 1.0 - 0.0125 * 64);
  EXPECT_DOUBLE_EQ(many.eps, 2e-8 / 8.0);
  EXPECT_THROW(adam_constants(81), std::invalid_argument);  // β2 would be negative
}

TEST(Ema, BetaAtAppendixBSteps) {
  // defaults: halflife 1e-3 thousand samples, ramp-up 0.09, N = 1
  EXPECT_DOUBLE_EQ(ema_beta(0, 1, 1e-3, 0.09), 0.0);  // a copy
  EXPECT_DOUBLE_EQ(ema_beta(1, 1, 1e-3, 0.09), std::pow(0.5, 1.0 / 0.09));
  EXPECT_NEAR(ema_beta(11, 1, 1e-3, 0.09), std::pow(0.5, 1.0 / 0.99), 1e-15);
  EXPECT_DOUBLE_EQ(ema_beta(12, 1, 1e-3, 0.09), 0.5);
}

}  // namespace
}  // namespace wg
