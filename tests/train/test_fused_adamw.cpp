// FusedAdamW against torch::optim::AdamW: the same updates within float
// rounding, the same state under the same keys, the same thread-count
// independence as the rest of the step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "../common/thread_count.h"
#include "wg/train/fused_adamw.h"
#include "wg/util/optimizer_state_key.h"

namespace wg {
namespace {

// Parameters of the shapes a model has (a matrix, a bias, one element, one
// that is not float32 and one whose gradient is never set), the same
// values for every optimizer compared.
std::vector<torch::Tensor> make_params() {
  torch::manual_seed(3);
  std::vector<torch::Tensor> ps{torch::randn({257, 131}), torch::randn({131}), torch::randn({1}),
                                torch::randn({40, 3}, torch::kDouble), torch::randn({9})};
  for (auto& p : ps) p.set_requires_grad(true);
  return ps;
}

std::vector<torch::Tensor> clone(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().set_requires_grad(true));
  return out;
}

// Step k's gradients (none for the last parameter), the same for all.
void set_grads(std::vector<torch::Tensor>& ps, int k) {
  torch::manual_seed(100 + k);
  for (size_t i = 0; i + 1 < ps.size(); ++i) ps[i].mutable_grad() = torch::randn_like(ps[i]) * (1.0 + k);
}

torch::optim::AdamWOptions options() {
  return torch::optim::AdamWOptions(3e-3).betas({0.9, 0.98}).eps(1e-8).weight_decay(0.1);
}

// Five steps with β1 and lr changing each step, as the schedule does.
template <typename Opt>
void train(Opt& opt, std::vector<torch::Tensor>& ps) {
  for (int k = 0; k < 5; ++k) {
    set_grads(ps, k);
    for (auto& g : opt.param_groups())
      static_cast<torch::optim::AdamWOptions&>(g.options()).lr(3e-3 * (k + 1)).betas({0.95 - 0.01 * k, 0.98});
    opt.step();
  }
}

const torch::optim::AdamWParamState& state_of(torch::optim::AdamW& opt, const torch::Tensor& p) {
  return static_cast<const torch::optim::AdamWParamState&>(
      *opt.state().at(optimizer_state_key(p)));
}

TEST(FusedAdamW, EqualsTorchsAdamWWithinFloatRounding) {
  const auto init = make_params();
  auto a = clone(init), b = clone(init);
  torch::optim::AdamW reference(a, options());
  FusedAdamW fused(b, options());
  train(reference, a);
  train(fused, b);
  for (size_t i = 0; i + 1 < init.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    // the update moved every parameter, and both moved it alike
    EXPECT_GT((a[i] - init[i]).abs().max().item<double>(), 1e-3);
    EXPECT_TRUE(torch::allclose(b[i], a[i], 1e-6, 1e-7));
    const auto& sa = state_of(reference, a[i]);
    const auto& sb = state_of(fused, b[i]);
    EXPECT_EQ(sb.step(), 5);
    EXPECT_EQ(sa.step(), sb.step());
    // (the moments' entries reach about 5 and 25; near zero the rounding
    // of the larger terms they cancel from shows)
    EXPECT_TRUE(torch::allclose(sb.exp_avg(), sa.exp_avg(), 1e-6, 1e-6));
    EXPECT_TRUE(torch::allclose(sb.exp_avg_sq(), sa.exp_avg_sq(), 1e-6, 1e-6));
  }
  // float64 goes through torch's own operations: the same bits
  EXPECT_TRUE(torch::equal(b[3], a[3]));
  // written in place as torch's in-place operations would: autograd sees
  // the change (one bump per step)
  EXPECT_EQ(b[0]._version(), 5u);
  // a parameter without a gradient: untouched, no state
  EXPECT_TRUE(torch::equal(b.back(), init.back()));
  EXPECT_EQ(fused.state().size(), init.size() - 1);
}

TEST(FusedAdamW, OneThreadGivesWhatTwoGive) {
  const auto init = make_params();
  auto one = clone(init), two = clone(init);
  FusedAdamW a(one, options()), b(two, options());
  {
    const testing::ThreadCount scoped(1);
    train(a, one);
  }
  {
    const testing::ThreadCount scoped(2);
    train(b, two);
  }
  for (size_t i = 0; i < init.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << "parameter " << i;
}

TEST(FusedAdamW, LoadedStateContinuesAsTheUninterruptedRun) {
  // State put where torch's AdamW (and training_state.h) puts it is used.
  const auto init = make_params();
  auto a = clone(init), b = clone(init);
  FusedAdamW first(a, options());
  train(first, a);
  FusedAdamW second(b, options());
  for (size_t i = 0; i + 1 < init.size(); ++i) {
    torch::NoGradGuard no_grad;
    b[i].copy_(a[i]);
    const auto& s = state_of(first, a[i]);
    auto copy = std::make_unique<torch::optim::AdamWParamState>();
    copy->step(s.step()).exp_avg(s.exp_avg().clone()).exp_avg_sq(s.exp_avg_sq().clone());
    second.state()[optimizer_state_key(b[i])] = std::move(copy);
  }
  for (auto* opt : {&first, &second})
    for (auto& g : opt->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(1e-2).betas({0.9, 0.98});
  set_grads(a, 7);
  set_grads(b, 7);
  first.step();
  second.step();
  for (size_t i = 0; i + 1 < init.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  EXPECT_EQ(state_of(second, b[0]).step(), 6);
}

// Float32 parameters only (clip_and_step's own pass needs every gradient
// on it), one of them large enough for several norm blocks and tasks.
std::vector<torch::Tensor> float_params() {
  torch::manual_seed(5);
  std::vector<torch::Tensor> ps{torch::randn({300, 257}), torch::randn({257}), torch::randn({1})};
  for (auto& p : ps) p.set_requires_grad(true);
  return ps;
}

TEST(FusedAdamW, ClipAndStepEqualsTorchsClipThenStep) {
  for (const double max_norm : {0.5, 1e30}) {  // clipping, and a bound no norm reaches
    SCOPED_TRACE(max_norm);
    const auto init = float_params();
    auto a = clone(init), b = clone(init);
    torch::optim::AdamW reference(a, options());
    FusedAdamW fused(b, options());
    for (int k = 0; k < 3; ++k) {
      set_grads(a, k);
      set_grads(b, k);
      const torch::Tensor g0 = b[0].grad().clone();
      const double want = torch::nn::utils::clip_grad_norm_(a, max_norm);
      reference.step();
      const double got = fused.clip_and_step(max_norm);
      EXPECT_NEAR(got, want, 1e-6 * want);
      EXPECT_GT(got, 1.0);  // the gradients' norm is far above 0.5: the first case clips
      EXPECT_TRUE(torch::equal(b[0].grad(), g0));  // read scaled, left as they were
    }
    for (size_t i = 0; i + 1 < init.size(); ++i) EXPECT_TRUE(torch::allclose(b[i], a[i], 1e-6, 1e-7)) << i;
  }
}

TEST(FusedAdamW, ClipAndStepIsTheSameForOneAndTwoThreads) {
  const auto init = float_params();
  const int threads = at::get_num_threads();
  auto one = clone(init), two = clone(init);
  FusedAdamW a(one, options()), b(two, options());
  double norms[2][3];
  for (int t = 0; t < 2; ++t) {
    at::set_num_threads(t + 1);
    for (int k = 0; k < 3; ++k) {
      set_grads(t == 0 ? one : two, k);
      norms[t][k] = (t == 0 ? a : b).clip_and_step(0.5);
    }
  }
  at::set_num_threads(threads);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(norms[0][k], norms[1][k]) << k;
  for (size_t i = 0; i < init.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << i;
}

// As upstream's GradScaler: a NaN or inf gradient gives a non-finite norm
// and no step, on the fused path and on torch's (a float64 parameter).
TEST(FusedAdamW, ANonFiniteGradientGivesANonFiniteNormAndNoStep) {
  for (const bool fused_path : {true, false}) {
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      SCOPED_TRACE(std::to_string(fused_path) + " " + std::to_string(bad));
      auto ps = float_params();
      if (!fused_path) ps[1] = ps[1].detach().to(torch::kFloat64).requires_grad_(true);
      const auto before = clone(ps);
      FusedAdamW opt(ps, options());
      set_grads(ps, 0);
      ps[1].mutable_grad()[3] = bad;
      EXPECT_FALSE(std::isfinite(opt.clip_and_step(0.5)));
      for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(torch::equal(ps[i], before[i])) << i;
      EXPECT_TRUE(opt.state().empty());  // no moments, no step count
      set_grads(ps, 1);                  // finite again: it steps
      EXPECT_TRUE(std::isfinite(opt.clip_and_step(0.5)));
      EXPECT_FALSE(torch::equal(ps[0], before[0]));
    }
  }
}

// The torch path (a gradient that is not float32) clips with the bits of
// torch's clip_grad_norm_ and steps as torch's AdamW.
TEST(FusedAdamW, TorchPathEqualsTorchsClipThenStep) {
  torch::manual_seed(6);
  std::vector<torch::Tensor> init{torch::randn({40, 7}, torch::kFloat64), torch::randn({7}, torch::kFloat64),
                                  torch::randn({1}, torch::kFloat64)};
  auto a = clone(init), b = clone(init);
  for (auto* v : {&a, &b})
    for (auto& p : *v) p.set_requires_grad(true);
  torch::optim::AdamW reference(a, options());
  FusedAdamW fused(b, options());
  for (int k = 0; k < 3; ++k) {
    set_grads(a, k);
    set_grads(b, k);
    const double want = torch::nn::utils::clip_grad_norm_(a, 0.5);
    reference.step();
    EXPECT_EQ(fused.clip_and_step(0.5), want);
    for (size_t i = 0; i + 1 < a.size(); ++i)                    // set_grads leaves the last without a gradient
      EXPECT_TRUE(torch::equal(b[i].grad(), a[i].grad())) << i;  // clipped in place, as torch
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(b[i], a[i])) << i;
  }
}

TEST(FusedAdamW, RefusesAmsgrad) {
  auto ps = make_params();
  EXPECT_THROW(FusedAdamW(ps, options().amsgrad(true)), std::invalid_argument);
}

}  // namespace
}  // namespace wg
