// The attention kernel's row-wise softmax steps (wg/model/softmax_rows.h):
// float's own exp within 2 ulp of std::exp, and each step equal to the
// ATen operations it replaces, row by row, whatever the rows it is given
// at once.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "wg/model/softmax_rows.h"

namespace wg {
namespace {

int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, sizeof a);
  std::memcpy(&ib, &b, sizeof b);
  return std::abs(int64_t(ia) - int64_t(ib));  // both positive here
}

TEST(SoftmaxRows, ExpIsWithinTwoUlpOfStdExp) {
  std::vector<float> x, y;
  for (float v = -87.0f; v <= 88.0f; v += 0.000731f) x.push_back(v);
  for (const float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.5f, -0.5f, 1.0f, -1.0f, 88.0f, -87.0f}) x.push_back(v);
  y.resize(x.size());
  exp_float(x.data(), y.data(), int64_t(x.size()));
  int64_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulp_distance(y[i], std::exp(x[i])));
  EXPECT_LE(worst, 2) << "over " << x.size() << " arguments";
  float one;
  const float zero = 0.0f;
  exp_float(&zero, &one, 1);
  EXPECT_EQ(one, 1.0f);
}

TEST(SoftmaxRows, ExpKeepsNanIsZeroFarBelowAndSaturatesAbove) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{nan, -87.4f, -100.0f, -1e30f, -inf, 89.0f, inf};
  std::vector<float> y(x.size());
  exp_float(x.data(), y.data(), int64_t(x.size()));
  EXPECT_TRUE(std::isnan(y[0]));
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(y[i], 0.0f) << x[i];
  for (size_t i = 5; i < x.size(); ++i) {
    EXPECT_TRUE(std::isfinite(y[i])) << x[i];
    EXPECT_GT(y[i], 1e38f) << x[i];
  }
}

// A masked score (-inf) gets probability 0 and a row's other entries are
// ATen's, as a row of scores far apart gets them.
TEST(SoftmaxRows, MaskedAndFarScoresGetZeroAsATenDoes) {
  const float inf = std::numeric_limits<float>::infinity();
  const torch::Tensor s = torch::tensor({0.5f, -inf, 1.0f, -200.0f, 0.25f, -inf, -90.0f, 2.0f, 0.0f}).reshape({1, 9});
  torch::Tensor p = s.clone();
  float lse = 0;
  softmax_rows(p.data_ptr<float>(), 1, 9, &lse);
  const torch::Tensor want = torch::softmax(s, -1);
  EXPECT_TRUE(torch::allclose(p, want, 1e-6, 1e-30));  // ATen's e^-92 is subnormal
  for (const int64_t j : {1, 3, 5, 6}) EXPECT_EQ(p[0][j].item<float>(), 0.0f) << j;
  torch::Tensor again = s.clone();
  exp_rows_minus(again.data_ptr<float>(), 1, 9, &lse);
  EXPECT_TRUE(torch::allclose(again, p, 1e-6, 0));
}

// Scores with rows of every length the kernel meets (1, under a vector,
// odd, several vectors), some rows far from 0.
torch::Tensor scores(int64_t rows, int64_t cols, torch::ScalarType dtype) {
  torch::manual_seed(cols);
  return (torch::randn({rows, cols}, torch::kDouble) * 4 + torch::randn({rows, 1}, torch::kDouble) * 30).to(dtype);
}

template <typename T>
void check_steps(torch::ScalarType dtype, double tol) {
  for (const int64_t cols : {1, 7, 8, 17, 71, 79, 128, 300}) {
    SCOPED_TRACE(cols);
    const int64_t rows = 37;
    const torch::Tensor s = scores(rows, cols, dtype);
    torch::Tensor p = s.clone();
    std::vector<T> lse(rows);
    softmax_rows(p.data_ptr<T>(), rows, cols, lse.data());
    const torch::Tensor lse_t = torch::from_blob(lse.data(), {rows, 1}, dtype);
    EXPECT_TRUE(torch::allclose(p, torch::softmax(s, -1), tol, tol));
    EXPECT_TRUE(torch::allclose(lse_t, torch::logsumexp(s, -1, true), tol, tol));

    torch::Tensor again = s.clone();
    exp_rows_minus(again.data_ptr<T>(), rows, cols, lse.data());
    EXPECT_TRUE(torch::allclose(again, torch::exp(s - lse_t), tol, tol));

    const torch::Tensor dp = torch::randn({rows, cols}, dtype), dot = torch::randn({rows, 1}, dtype);
    torch::Tensor g = dp.clone();
    softmax_grad_rows(g.data_ptr<T>(), p.data_ptr<T>(), rows, cols, dot.data_ptr<T>());
    EXPECT_TRUE(torch::allclose(g, (dp - dot) * p, tol, tol));

    // one row at a time gives the same bits as all rows at once
    torch::Tensor single = s.clone();
    std::vector<T> lse_single(rows);
    for (int64_t r = 0; r < rows; ++r) softmax_rows(single.data_ptr<T>() + r * cols, 1, cols, &lse_single[size_t(r)]);
    EXPECT_TRUE(torch::equal(single, p));
    EXPECT_EQ(lse_single, lse);
    torch::Tensor again_single = s.clone();
    for (int64_t r = 0; r < rows; ++r) exp_rows_minus(again_single.data_ptr<T>() + r * cols, 1, cols, &lse[size_t(r)]);
    EXPECT_TRUE(torch::equal(again_single, again));
  }
}

TEST(SoftmaxRows, FloatStepsEqualATensWithinTolerance) { check_steps<float>(torch::kFloat, 1e-6); }
TEST(SoftmaxRows, DoubleStepsEqualATensWithinTolerance) { check_steps<double>(torch::kDouble, 1e-13); }

TEST(SoftmaxRows, ANanInARowMakesTheRowNan) {
  torch::Tensor s = torch::randn({2, 20});
  s[0][5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> lse(2);
  softmax_rows(s.data_ptr<float>(), 2, 20, lse.data());
  EXPECT_TRUE(torch::all(torch::isnan(s[0])).item<bool>());
  EXPECT_TRUE(std::isnan(lse[0]));
  EXPECT_FALSE(torch::any(torch::isnan(s[1])).item<bool>());
}

}  // namespace
}  // namespace wg
