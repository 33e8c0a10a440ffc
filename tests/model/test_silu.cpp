// wg::silu (wg/model/silu.h): SiLU in one vectorised pass, within a few
// ulp of torch::silu forward and of autograd's backward, whatever the
// thread count or where an element falls in a range, in place or not.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "../common/thread_count.h"
#include "wg/model/silu.h"

namespace wg {
namespace {

// Arguments over SiLU's whole range: tails where the sigmoid is tiny or
// 1, past float's exp range (|x| > 88), and 0.
torch::Tensor arguments(torch::ScalarType dtype) {
  torch::manual_seed(3);
  const torch::Tensor spread = torch::randn({100003}, torch::kDouble) * 4;
  const torch::Tensor edges = torch::tensor(
      {0.0, -0.0, 1e-8, -1e-8, -1.2784645, 6.0, -6.0, 20.0, -20.0, 40.0, -40.0, 87.0, -87.0, 100.0, -100.0},
      torch::kDouble);
  return torch::cat({spread, edges}).to(dtype);
}

struct Case {
  torch::ScalarType dtype;
  double rtol, atol;  // float: the exp's 2 ulp and the division's rounding
};
const Case kCases[] = {{torch::kFloat, 2e-6, 1e-7}, {torch::kDouble, 1e-14, 1e-15}};

TEST(Silu, ForwardAndBackwardAreAtensWithinAFewUlp) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.dtype);
    const torch::Tensor x = arguments(c.dtype), dh = torch::randn_like(x);
    EXPECT_TRUE(torch::allclose(silu_forward(x), torch::silu(x), c.rtol, c.atol));
    EXPECT_TRUE(torch::allclose(silu_backward(dh, x, torch::empty_like(x)), at::silu_backward(dh, x), c.rtol, c.rtol));
  }
}

TEST(Silu, AutogradRunsTheKernelsAndMatchesAtensGradient) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.dtype);
    const torch::Tensor x0 = arguments(c.dtype).reshape({-1, 2}), w = torch::randn_like(x0);
    torch::Tensor xa = x0.clone().requires_grad_(), xb = x0.clone().requires_grad_();
    const torch::Tensor ha = wg::silu(xa), hb = torch::silu(xb);
    EXPECT_TRUE(torch::equal(ha.detach(), silu_forward(x0)));
    (ha * w).sum().backward();
    (hb * w).sum().backward();
    EXPECT_TRUE(torch::equal(xa.grad(), silu_backward(w, x0, torch::empty_like(x0))));
    EXPECT_TRUE(torch::allclose(xa.grad(), xb.grad(), c.rtol, c.rtol));
  }
  // a view that is not contiguous is copied first; its gradient against
  // central differences in double
  const torch::Tensor x = (torch::randn({6, 4}, torch::kDouble) * 4).t().requires_grad_();
  wg::silu(x).sum().backward();
  const double eps = 1e-6;
  const torch::Tensor numeric = (torch::silu(x.detach() + eps) - torch::silu(x.detach() - eps)) / (2 * eps);
  EXPECT_TRUE(torch::allclose(x.grad(), numeric, 1e-8, 1e-8));
}

TEST(Silu, BackwardInPlaceEqualsOutOfPlaceAndLeavesTheGradientAlone) {
  const torch::Tensor x = arguments(torch::kFloat), dh = torch::randn_like(x);
  const torch::Tensor before = dh.clone();
  const torch::Tensor out = silu_backward(dh, x, torch::empty_like(x));
  EXPECT_TRUE(torch::equal(dh, before));
  torch::Tensor g = dh.clone();
  const torch::Tensor same = silu_backward(g, x, g);
  EXPECT_EQ(same.data_ptr(), g.data_ptr());
  EXPECT_TRUE(torch::equal(out, g));
}

// The bits of an element depend neither on the thread count nor on its
// place in a range (vector body or scalar tail): the lean AdaLayerNorm
// runs the kernel again in backward on other ranges than its forward.
TEST(Silu, TheResultDoesNotDependOnTheThreadsOrTheOffset) {
  const torch::Tensor x = arguments(torch::kFloat), dh = torch::randn_like(x);
  const auto runs = testing::on_each_thread_count({1, 2, 3}, [&] {
    return std::pair{silu_forward(x), silu_backward(dh, x, torch::empty_like(x))};
  });
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_TRUE(torch::equal(runs[i].first, runs[0].first));
    EXPECT_TRUE(torch::equal(runs[i].second, runs[0].second));
  }
  const torch::Tensor &h0 = runs[0].first, &g0 = runs[0].second;
  for (const int64_t offset : {1, 3, 7}) {
    SCOPED_TRACE(offset);
    const torch::Tensor xs = x.narrow(0, offset, 1001).contiguous(), ds = dh.narrow(0, offset, 1001).contiguous();
    EXPECT_TRUE(torch::equal(silu_forward(xs), h0.narrow(0, offset, 1001)));
    EXPECT_TRUE(torch::equal(silu_backward(ds, xs, torch::empty_like(xs)), g0.narrow(0, offset, 1001)));
  }
}

TEST(Silu, NanStaysNanOtherDtypesTakeAtensAndBadInputIsRefused) {
  const torch::Tensor x = torch::tensor({std::numeric_limits<float>::quiet_NaN(), 1.0f});
  EXPECT_TRUE(std::isnan(silu_forward(x)[0].item<float>()));
  EXPECT_TRUE(std::isnan(silu_backward(torch::ones_like(x), x, torch::empty_like(x))[0].item<float>()));
  const torch::Tensor half = torch::randn({9}).to(torch::kBFloat16);
  EXPECT_FALSE(silu_runs_on(half));
  EXPECT_TRUE(torch::equal(wg::silu(half), torch::silu(half)));
  EXPECT_THROW(silu_forward(x.to(torch::kInt)), c10::Error);
  EXPECT_THROW(silu_forward(torch::randn({4, 4}).t()), c10::Error);
  EXPECT_THROW(silu_backward(x, x.narrow(0, 0, 1), torch::empty_like(x)), c10::Error);
  EXPECT_THROW(silu_backward(x, x, torch::empty_like(x).to(torch::kDouble)), c10::Error);
}

}  // namespace
}  // namespace wg
