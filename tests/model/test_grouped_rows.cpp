// The read-out's grouped product on rows in place (wg/model/grouped_rows.h)
// against one LibTorch product per group, forward and both gradients;
// its bits do not depend on the thread count; and grouped_linear takes it
// for few outputs a group and a batched product for more, with the same
// results.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "../common/thread_count.h"
#include "wg/model/grouped_rows.h"
#include "wg/model/lean_ops.h"

namespace wg {
namespace {

struct Case {
  int64_t n, groups, in, out;
  bool bias;
};

// y, dx, dw, db of the kernels for x [n, G, in], w [G, out, in], b [G, out], dy [n, G, out].
std::vector<torch::Tensor> run_kernels(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                                       const torch::Tensor& dy) {
  const int64_t n = x.size(0), G = x.size(1), in = x.size(2), out = w.size(1);
  torch::Tensor y = torch::empty({n, G, out}, x.options()), dx = torch::empty_like(x), dw = torch::empty_like(w),
                db = b.defined() ? torch::empty_like(b) : torch::Tensor();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "test", [&] {
    grouped_rows_forward<scalar_t>(x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(),
                                   b.defined() ? b.data_ptr<scalar_t>() : nullptr, n, G, in, out,
                                   y.data_ptr<scalar_t>());
    grouped_rows_input_grad<scalar_t>(dy.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), n, G, in, out,
                                      dx.data_ptr<scalar_t>());
    grouped_rows_weight_grad<scalar_t>(dy.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), n, G, in, out,
                                       dw.data_ptr<scalar_t>(), db.defined() ? db.data_ptr<scalar_t>() : nullptr);
  });
  return {y, dx, dw, db};
}

TEST(GroupedRows, EqualOneProductPerGroup) {
  torch::manual_seed(4);
  for (const Case c :
       {Case{7, 5, 16, 3, true}, Case{3, 79, 13, 1, false}, Case{0, 4, 8, 2, true}, Case{40, 3, 256, 32, true}}) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " groups " << c.groups << " in " << c.in << " out " << c.out);
    const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
    const torch::Tensor x = torch::randn({c.n, c.groups, c.in}, opt), w = torch::randn({c.groups, c.out, c.in}, opt),
                        b = c.bias ? torch::randn({c.groups, c.out}, opt) : torch::Tensor(),
                        dy = torch::randn({c.n, c.groups, c.out}, opt);
    const std::vector<torch::Tensor> got = run_kernels(x, w, b, dy);
    for (int64_t g = 0; g < c.groups; ++g) {
      const torch::Tensor xg = x.select(1, g), dyg = dy.select(1, g), wg = w[g];
      torch::Tensor y = xg.mm(wg.t());
      if (c.bias) y = y + b[g];
      EXPECT_TRUE(torch::allclose(got[0].select(1, g), y, 1e-12, 1e-12)) << "y, group " << g;
      EXPECT_TRUE(torch::allclose(got[1].select(1, g), dyg.mm(wg), 1e-12, 1e-12)) << "dx, group " << g;
      EXPECT_TRUE(torch::allclose(got[2][g], dyg.t().mm(xg), 1e-12, 1e-12)) << "dw, group " << g;
      if (c.bias) EXPECT_TRUE(torch::allclose(got[3][g], dyg.sum(0), 1e-12, 1e-12)) << "db, group " << g;
    }
    if (c.n == 0) {  // no rows: zero gradients of the weights
      EXPECT_EQ(got[2].abs().sum().item<double>(), 0.0);
      EXPECT_EQ(got[3].abs().sum().item<double>(), 0.0);
    }
  }
}

TEST(GroupedRows, TheBitsDoNotDependOnTheThreadCount) {
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({301, 79, 256}), w = torch::randn({79, 3, 256}), b = torch::randn({79, 3}),
                      dy = torch::randn({301, 79, 3});
  const auto runs = testing::on_each_thread_count({1, 2}, [&] { return run_kernels(x, w, b, dy); });
  for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_TRUE(torch::equal(runs[0][i], runs[1][i])) << "result " << i;
}

// grouped_linear: few outputs a group on rows in place (its output the
// kernel's, bit for bit), more (above 32) as one batched product; each
// against a product per group, the gradients of x, the weights and the
// biases, in float and double, with a lean norm before it as the read-out
// runs it.
TEST(GroupedRows, GroupedLinearTakesRowsForFewOutputsAndABatchedProductForMore) {
  torch::manual_seed(9);
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
    for (const int64_t out : {3, 40}) {
      SCOPED_TRACE(::testing::Message() << dtype << ", " << out << " outputs");
      const int64_t N = 6, G = 5, in = 24;
      const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
      const auto leaf = [&](std::vector<int64_t> s) { return torch::randn(s, dtype).requires_grad_(true); };
      const torch::Tensor x = leaf({N, G, in}), ln_w = leaf({G, in}), ln_b = leaf({G, in});
      std::vector<torch::Tensor> w, b, wrt{x, ln_w, ln_b};
      for (int64_t g = 0; g < G; ++g) {
        w.push_back(leaf({out, in}));
        b.push_back(leaf({out}));
        wrt.push_back(w.back());
        wrt.push_back(b.back());
      }
      const torch::Tensor seed = torch::randn({N, G, out}, dtype);
      const auto grads = [&](const torch::Tensor& y) {
        for (auto& t : wrt) t.mutable_grad() = torch::Tensor();
        (y * seed).sum().backward();
        std::vector<torch::Tensor> g{y.detach()};
        for (const auto& t : wrt) g.push_back(t.grad().clone());
        return g;
      };
      const std::vector<torch::Tensor> got =
          grads(grouped_linear(x, channel_norm_prelude(1e-5, ln_w, ln_b), w, b, Saving::Lean));
      const torch::Tensor h = (torch::layer_norm(x, {in}, {}, {}, 1e-5) * ln_w + ln_b).detach();
      if (out == 3) {  // on rows: the kernel's own output
        const torch::NoGradGuard no_grad;
        const torch::Tensor W = torch::stack(w), B = torch::stack(b);
        torch::Tensor y = torch::empty({N, G, out}, h.options());
        AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "test", [&] {
          grouped_rows_forward<scalar_t>(h.data_ptr<scalar_t>(), W.data_ptr<scalar_t>(), B.data_ptr<scalar_t>(), N, G,
                                         in, out, y.data_ptr<scalar_t>());
        });
        EXPECT_TRUE(torch::equal(got[0], y));
      }
      std::vector<torch::Tensor> per_group;
      const torch::Tensor normed = torch::layer_norm(x, {in}, {}, {}, 1e-5) * ln_w + ln_b;
      for (int64_t g = 0; g < G; ++g)
        per_group.push_back(torch::linear(normed.select(1, g), w[size_t(g)], b[size_t(g)]));
      const std::vector<torch::Tensor> want = grads(torch::stack(per_group, 1));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(torch::allclose(got[i], want[i], tol, tol)) << "tensor " << i << " (0: the output)";
    }
}

}  // namespace
}  // namespace wg
