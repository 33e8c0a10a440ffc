// The per-head q/k layer norm (wg/model/head_norm.h) against LibTorch's
// layer norm and its backward: rows read from and gradients written into
// column blocks of wider tensors (the neighbours untouched), head widths
// that are and are not a multiple of the sum lanes, float and double; the
// backward in place (dy's columns replaced by dx) with the same bits; the
// same bits on one thread as on two, and as norming each slice alone.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "../common/thread_count.h"
#include "wg/model/head_norm.h"
#include "wg/model/lane_sum.h"

namespace wg {
namespace {

struct Case {
  int64_t rows, heads, dh, col, width;  // the norm's columns: [col, col + heads·dh) of [rows, width]
};

// The norm of block `c` of x [rows, width] (contiguous): y [rows, heads, dh], rstd [rows, heads].
std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x, const Case& c, double eps) {
  torch::Tensor y = torch::empty({c.rows, c.heads, c.dh}, x.options()), rstd = torch::empty({c.rows, c.heads}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "head norm", [&] {
    head_norm_forward(x.data_ptr<scalar_t>() + c.col, x.size(1), c.rows, c.heads, c.dh, eps, y.data_ptr<scalar_t>(),
                      rstd.data_ptr<scalar_t>());
  });
  return {y, rstd};
}

// Its backward into block `c` of dx [rows, width].
void backward(const torch::Tensor& dy, const torch::Tensor& y, const torch::Tensor& rstd, const Case& c,
              torch::Tensor& dx) {
  AT_DISPATCH_FLOATING_TYPES(dx.scalar_type(), "head norm backward", [&] {
    head_norm_backward(dy.data_ptr<scalar_t>(), c.heads * c.dh, y.data_ptr<scalar_t>(), rstd.data_ptr<scalar_t>(),
                       c.rows, c.heads, c.dh, dx.data_ptr<scalar_t>() + c.col, dx.size(1));
  });
}

// The block of x [rows, width] as [rows, heads, dh].
torch::Tensor block(const torch::Tensor& x, const Case& c) {
  return x.narrow(1, c.col, c.heads * c.dh).reshape({c.rows, c.heads, c.dh});
}

void check(const Case& c, torch::Dtype dtype, double tol) {
  SCOPED_TRACE("dh " + std::to_string(c.dh) + (dtype == torch::kFloat64 ? " double" : " float"));
  const double eps = 1e-5;
  const auto o = torch::TensorOptions().dtype(dtype);
  const torch::Tensor x = torch::randn({c.rows, c.width}, o) * 3 + 1;
  const auto [y, rstd] = forward(x, c, eps);
  const auto [want_y, want_mean, want_rstd] = at::native_layer_norm(block(x, c).contiguous(), {c.dh}, {}, {}, eps);
  EXPECT_LE((y - want_y).abs().max().item<double>(), tol);
  EXPECT_LE((rstd - want_rstd.view({c.rows, c.heads})).abs().max().item<double>() /
                want_rstd.abs().max().item<double>(), tol);
  // Backward into the same columns of a wider gradient; its other columns keep their values.
  const torch::Tensor dy = torch::randn({c.rows, c.heads, c.dh}, o);
  const torch::Tensor want_dx = std::get<0>(at::native_layer_norm_backward(
      dy, block(x, c).contiguous(), {c.dh}, want_mean, want_rstd, {}, {}, {true, false, false}));
  torch::Tensor dx = torch::full({c.rows, c.width}, 7.0, o);
  backward(dy, y, rstd, c, dx);
  EXPECT_LE((block(dx, c) - want_dx).abs().max().item<double>() / want_dx.abs().max().item<double>(), tol);
  const torch::Tensor outside = torch::cat({dx.narrow(1, 0, c.col), dx.narrow(1, c.col + c.heads * c.dh,
                                                                              c.width - c.col - c.heads * c.dh)}, 1);
  EXPECT_TRUE(torch::equal(outside, torch::full_like(outside, 7.0)));
  // In place, as the attention kernel runs it: dy in the same columns of a
  // wider tensor, replaced by dx with the same bits; the neighbours untouched.
  torch::Tensor in_place = torch::full({c.rows, c.width}, 7.0, o);
  block(in_place, c).copy_(dy);
  AT_DISPATCH_FLOATING_TYPES(dx.scalar_type(), "head norm backward in place", [&] {
    scalar_t* d = in_place.data_ptr<scalar_t>() + c.col;
    head_norm_backward(d, c.width, y.data_ptr<scalar_t>(), rstd.data_ptr<scalar_t>(), c.rows, c.heads, c.dh, d, c.width);
  });
  EXPECT_TRUE(torch::equal(in_place, dx));
}

TEST(HeadNorm, EqualsLayerNormOnColumnBlocks) {
  torch::manual_seed(21);
  for (const Case& c : {Case{37, 4, 16, 64, 192}, Case{5, 3, 13, 39, 117}, Case{1, 2, 8, 0, 48}, Case{200, 1, 3, 1, 5},
                        Case{23, 3, 8, 5, 40}}) {  // 69 (row, head) slices: the forward's batches of 32 end mid-row
    check(c, torch::kFloat32, 2e-6);
    check(c, torch::kFloat64, 1e-13);
  }
}

// The forward norms its (row, head) slices in batches; each slice's values
// are those of norming it alone, step by step as below (the sums in
// lane_sum's lanes), to the bit: batches ending mid-row, on one thread and
// on two.
TEST(HeadNorm, EachSliceHasTheBitsOfNormingItAlone) {
  torch::manual_seed(23);
  const Case c{301, 3, 8, 5, 40};  // 903 slices: batches of 32 end mid-row; two threads split the rows
  const double eps = 1e-5;
  const torch::Tensor x = torch::randn({c.rows, c.width}) * 3 + 1;
  torch::Tensor want_y = torch::empty({c.rows, c.heads, c.dh}), want_rstd = torch::empty({c.rows, c.heads});
  const float* xp = x.data_ptr<float>() + c.col;
  float *yp = want_y.data_ptr<float>(), *rp = want_rstd.data_ptr<float>();
  const float inv_n = 1.0f / float(c.dh), e = float(eps);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t h = 0; h < c.heads; ++h) {
      const float* xi = xp + r * c.width + h * c.dh;
      const float mean = lane_sum<float>(c.dh, [&](int64_t j) { return xi[j]; }) * inv_n;
      volatile float var = lane_sum<float>(c.dh, [&](int64_t j) { return (xi[j] - mean) * (xi[j] - mean); }) * inv_n;
      const float rs = 1.0f / std::sqrt(var + e);
      for (int64_t j = 0; j < c.dh; ++j) yp[(r * c.heads + h) * c.dh + j] = (xi[j] - mean) * rs;
      rp[r * c.heads + h] = rs;
    }
  const auto runs = testing::on_each_thread_count({1, 2}, [&] {
    const auto [y, rstd] = forward(x, c, eps);
    return std::vector<torch::Tensor>{y, rstd};
  });
  for (const auto& run : runs) {
    EXPECT_TRUE(torch::equal(run[0], want_y));
    EXPECT_TRUE(torch::equal(run[1], want_rstd));
  }
}

TEST(HeadNorm, TheSameBitsOnOneThreadAsOnTwo) {
  torch::manual_seed(22);
  const Case c{4000, 4, 32, 128, 384};
  const torch::Tensor x = torch::randn({c.rows, c.width}), dy = torch::randn({c.rows, c.heads, c.dh});
  const auto runs = testing::on_each_thread_count({1, 2}, [&] {
    const auto [y, rstd] = forward(x, c, 1e-6);
    torch::Tensor dx = torch::zeros({c.rows, c.width});
    backward(dy, y, rstd, c, dx);
    return std::vector<torch::Tensor>{y, rstd, dx};
  });
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(runs[0][i], runs[1][i])) << i;
}

}  // namespace
}  // namespace wg
