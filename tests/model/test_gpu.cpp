// On a CUDA device (each test skips cleanly where there is none): the
// attention cores there (LibTorch's scaled_dot_product_attention on padded
// segments) against this project's CPU kernel; a training step in bf16
// autocast, its loss finite and the caching allocator's reserved peak at
// least its allocated peak; recomputation still giving the gradients of
// none; a float16 step under dynamic loss scaling. bench/gpu/run.sh runs
// these on a GPU machine.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../common/tiny_config.h"
#include "wg/config/recompute_sections.h"
#include "wg/dist/devices.h"
#include "wg/model/attention_core.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

bool have_gpu() { return cuda_device_count() > 0 && torch::cuda::is_available(); }

TEST(Gpu, AttentionCoresEqualTheCpuKernel) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
  const std::vector<int64_t> lq = {3, 0, 7, 1, 12}, lk = {5, 2, 0, 1, 9};
  const int64_t rq = 23, rk = 17;
  torch::manual_seed(1);
  const torch::Tensor q = torch::randn({rq, 4, 16}), k = torch::randn({rk, 4, 16}), v = torch::randn({rk, 4, 16});
  const torch::Tensor g = torch::randn({rq, 4, 16});
  const auto run = [&](const torch::Device& d) {
    const VarlenSegments seg = VarlenSegments::from_lengths(lq, lk, d);
    torch::Tensor a = q.to(d).requires_grad_(true), b = k.to(d).requires_grad_(true), c = v.to(d).requires_grad_(true);
    torch::Tensor out = varlen_attention(a, b, c, seg, 0.0, true);
    (out * g.to(d)).sum().backward();
    return std::vector<torch::Tensor>{out.cpu(), a.grad().cpu(), b.grad().cpu(), c.grad().cpu()};
  };
  const auto cpu = run(torch::kCPU), gpu = run(torch::Device(torch::kCUDA, 0));
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_TRUE(torch::allclose(gpu[i], cpu[i], 1e-4, 1e-5)) << "tensor " << i << " differs by "
                                                             << (gpu[i] - cpu[i]).abs().max().item<double>();
  // Dense, in bf16 as autocast runs it: close to float32 within bf16's precision.
  const torch::Tensor x = torch::randn({2, 64, 4, 16}, torch::Device(torch::kCUDA, 0));
  const torch::Tensor ref = dense_attention(x, x, x, 0.0, false);
  const torch::Tensor low = dense_attention(x.to(torch::kBFloat16), x.to(torch::kBFloat16), x.to(torch::kBFloat16), 0.0,
                                            false);
  EXPECT_LT((low.to(torch::kFloat) - ref).abs().max().item<double>(), 0.05);
}

TEST(Gpu, Bf16StepHasAFiniteLossAndReservedAtLeastAllocated) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
  Config c = testing::tiny_config();
  c.device = "cuda";
  c.with_mixed_precision = true;
  c.attention_dtype = "bf16";
  Config full = c;
  full.gradient_checkpointing = every_section(RecomputeMode::Full);
  const torch::Device gpu(torch::kCUDA, 0);
  Trainer a(c, Dataset(c, 0, 1), resolve_plan(c), gpu), b(full, Dataset(full, 0, 1), resolve_plan(full), gpu);
  for (int64_t step = 0; step < 3; ++step) {
    const BuiltBatch batch = a.dataset().batch(step);
    torch::manual_seed(step);
    const StepMetrics ma = a.step_on(batch, step);
    torch::manual_seed(step);
    const StepMetrics mb = b.step_on(batch, step);
    EXPECT_TRUE(std::isfinite(ma.loss)) << "step " << step;
    EXPECT_GT(ma.peak_bytes, 0);
    EXPECT_GE(ma.peak_reserved_bytes, ma.peak_bytes);
    EXPECT_GT(ma.model_flops, 0);
    EXPECT_LT(mb.peak_bytes - mb.start_bytes, ma.peak_bytes - ma.start_bytes) << "full recomputation keeps less";
    EXPECT_NEAR(mb.loss, ma.loss, 1e-6 * std::abs(ma.loss)) << "the same step with and without recomputation";
  }
}

// float16 autocast scales the loss (loss_scaling: auto), as upstream's
// GradScaler: the steps train, each at the scale of its backward, halving
// it where a gradient overflowed.
TEST(Gpu, Fp16StepsScaleTheirLoss) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
  Config c = testing::tiny_config();
  c.device = "cuda";
  c.with_mixed_precision = true;
  c.attention_dtype = "fp16";
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::Device(torch::kCUDA, 0));
  ASSERT_TRUE(t.loss_scaler().enabled());
  const torch::Tensor before = t.model()->parameters()[0].detach().cpu();
  int stepped = 0;
  double scale = 65536.0;
  for (int64_t step = 0; step < 6; ++step) {
    const StepMetrics m = t.step(step);
    EXPECT_TRUE(std::isfinite(m.loss)) << "step " << step;
    EXPECT_EQ(m.loss_scale, scale) << "step " << step;
    if (m.skipped && m.nonfinite_grad) scale /= 2;  // an overflow at this scale
    stepped += m.skipped ? 0 : 1;
  }
  EXPECT_GT(stepped, 0);
  EXPECT_EQ(t.loss_scaler().scale(), scale);
  EXPECT_FALSE(torch::equal(before, t.model()->parameters()[0].detach().cpu()));
}

}  // namespace
}  // namespace wg
