// WeatherGenerator's learning-rate schedule at chosen steps.
#include <gtest/gtest.h>

#include <cmath>

#include "wg/train/lr_schedule.h"

namespace wg {
namespace {

LrConfig base() {
  LrConfig c;
  c.lr_start = 1e-6;
  c.lr_max = 5e-5;
  c.lr_final_decay = 1e-6;
  c.lr_final = 0;
  c.lr_steps_warmup = 100;
  c.lr_steps_cooldown = 50;
  c.lr_policy_warmup = "cosine";
  c.lr_policy_decay = "constant";
  c.lr_policy_cooldown = "linear";
  c.lr_scaling_policy = "none";
  return c;
}

TEST(LrSchedule, CosineWarmupConstantLinearCooldown) {
  LrSchedule s(base(), 1000);
  EXPECT_DOUBLE_EQ(s.at(0), 1e-6);
  EXPECT_NEAR(s.at(50), 1e-6 + (5e-5 - 1e-6) * 0.5, 1e-15);  // half-way on the cosine
  EXPECT_NEAR(s.at(25), 1e-6 + (5e-5 - 1e-6) * 0.5 * (1 - std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_DOUBLE_EQ(s.at(100), 5e-5);
  EXPECT_DOUBLE_EQ(s.at(949), 5e-5);
  EXPECT_DOUBLE_EQ(s.at(950), 5e-5);                  // cool-down starts at lr_max
  EXPECT_NEAR(s.at(975), 2.5e-5, 1e-15);              // half-way down, linear
  EXPECT_NEAR(s.at(999), 5e-5 * (1 - 49.0 / 50), 1e-15);
}

TEST(LrSchedule, LinearWarmupAndLinearDecay) {
  LrConfig c = base();
  c.lr_policy_warmup = "linear";
  c.lr_policy_decay = "linear";
  LrSchedule s(c, 1000);
  EXPECT_NEAR(s.at(10), 1e-6 + (5e-5 - 1e-6) * 0.1, 1e-15);
  // decay over [100, 950): half-way at 525
  EXPECT_NEAR(s.at(525), 5e-5 + (1e-6 - 5e-5) * 0.5, 1e-15);
  EXPECT_NEAR(s.at(950), 1e-6, 1e-15);  // cool-down from lr_final_decay
}

TEST(LrSchedule, CosineDecay) {
  LrConfig c = base();
  c.lr_policy_decay = "cosine";
  LrSchedule s(c, 1000);
  EXPECT_NEAR(s.at(100), 5e-5, 1e-15);
  EXPECT_NEAR(s.at(525), (5e-5 + 1e-6) / 2, 1e-15);
}

TEST(LrSchedule, ScalingByRanks) {
  LrConfig c = base();
  c.lr_scaling_policy = "sqrt";
  EXPECT_NEAR(LrSchedule(c, 1000, 4).at(500), 1e-4, 1e-15);
  c.lr_scaling_policy = "linear";
  EXPECT_NEAR(LrSchedule(c, 1000, 4).at(500), 2e-4, 1e-15);
  EXPECT_DOUBLE_EQ(LrSchedule(c, 1000, 4).at(0), 1e-6);  // lr_start is not scaled
}

TEST(LrSchedule, TooShortRunIsAnError) {
  try {
    LrSchedule s(base(), 120);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("exceed the run's 120 steps"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wg
