// The dynamic loss scaler's rule (torch.amp.GradScaler's update) and when
// the trainer scales. No LibTorch.
#include "wg/train/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace wg {
namespace {

TEST(LossScaler, DisabledScalesByOne) {
  LossScaler s(false);
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.update(true), 1.0);
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_FALSE(s.exhausted());
}

TEST(LossScaler, BacksOffOnANonFiniteStepAndGrowsAfterAnIntervalOfFiniteOnes) {
  LossScaler s(true, LossScalerOptions{65536.0, 2.0, 0.5, 3});
  EXPECT_EQ(s.scale(), 65536.0);  // upstream's GradScaler("cuda") starts at 2^16
  EXPECT_EQ(s.update(false), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 1);
  EXPECT_EQ(s.update(true), 32768.0);  // backoff resets the count of good steps
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.update(false), 32768.0);
  EXPECT_EQ(s.update(false), 32768.0);
  EXPECT_EQ(s.update(false), 65536.0);  // the third in a row grows
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScaler, TheDefaultsAreUpstreams) {
  const LossScalerOptions o;
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.growth_factor, 2.0);
  EXPECT_EQ(o.backoff_factor, 0.5);
  EXPECT_EQ(o.growth_interval, 2000);
  LossScaler s(true);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.update(false), 131072.0);
}

TEST(LossScaler, GrowsOnlyToAFiniteFloat) {
  LossScaler s(true, LossScalerOptions{65536.0, 2.0, 0.5, 1});
  s.restore(std::ldexp(1.0, 127), 0);
  EXPECT_EQ(s.update(false), std::ldexp(1.0, 127));  // 2^128 is not a float
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScaler, IsExhaustedBelowFloat16sSmallestSubnormal) {
  LossScaler s(true);
  for (int i = 0; i < 40; ++i) s.update(true);
  EXPECT_EQ(s.scale(), std::ldexp(1.0, -24));
  EXPECT_FALSE(s.exhausted());
  s.update(true);
  EXPECT_TRUE(s.exhausted());
}

TEST(LossScaler, RestoreChecksItsValues) {
  LossScaler s(true);
  s.restore(1024.0, 1999);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.growth_tracker(), 1999);
  EXPECT_THROW(s.restore(0.0, 0), std::invalid_argument);
  EXPECT_THROW(s.restore(INFINITY, 0), std::invalid_argument);
  EXPECT_THROW(s.restore(1.0, 2000), std::invalid_argument);
  EXPECT_THROW(s.restore(1.0, -1), std::invalid_argument);
  EXPECT_THROW(LossScaler(true, LossScalerOptions{1.0, 1.0, 0.5, 1}), std::invalid_argument);
  EXPECT_TRUE(s.accepts(0.5, 0));
  EXPECT_FALSE(s.accepts(0.5, 2000));
  s.reset();  // a checkpoint written without scaling: afresh
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

// auto scales only where it changes anything: float16 autocast on a GPU.
TEST(LossScaler, AutoScalesUnderFloat16AutocastOnAGpuOnly) {
  EXPECT_TRUE(loss_scaling_enabled("auto", true, true, "fp16"));
  EXPECT_FALSE(loss_scaling_enabled("auto", true, true, "bf16"));
  EXPECT_FALSE(loss_scaling_enabled("auto", true, false, "fp16"));
  EXPECT_FALSE(loss_scaling_enabled("auto", false, true, "fp16"));
  EXPECT_TRUE(loss_scaling_enabled("on", false, false, "fp32"));
  EXPECT_FALSE(loss_scaling_enabled("off", true, true, "fp16"));
  EXPECT_THROW(loss_scaling_enabled("yes", true, true, "fp16"), std::invalid_argument);
}

}  // namespace
}  // namespace wg
