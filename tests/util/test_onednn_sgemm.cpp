// float32 products through oneDNN (src/util/onednn_sgemm.cpp): LibTorch's
// products and wg::gemm reach it, and it gives what the BLAS's own sgemm_
// gives, in every case BLAS defines (both transposes, leading dimensions
// wider than the rows, alpha, beta 0 over NaN, beta scaling an empty
// product, empty C).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "wg/util/blas.h"
#include "wg/util/onednn_sgemm.h"
#include "wg/util/vector_isa.h"

namespace wg {
namespace {

// The BLAS's own sgemm_ (libblas.so.3: OpenBLAS), behind the executable's:
// looked up here, not by blas_own_sgemm(), so the test sees the routing
// independently of the code it checks.
SgemmFn blas_sgemm() { return reinterpret_cast<SgemmFn>(dlsym(RTLD_NEXT, "sgemm_")); }
// The one LibTorch binds to.
SgemmFn process_sgemm() { return reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "sgemm_")); }

TEST(OnednnSgemm, IsTheProcesssSgemmWhereBuilt) {
  EXPECT_EQ(onednn_sgemm_active(), onednn_sgemm_built());
  if (!onednn_sgemm_built()) {
    EXPECT_EQ(sgemm_provider(), "blas");
    GTEST_SKIP() << "built with WG_ONEDNN_SGEMM=OFF";
  }
  EXPECT_EQ(sgemm_provider().rfind("onednn ", 0), 0u) << sgemm_provider();
  ASSERT_NE(blas_sgemm(), nullptr) << "no BLAS sgemm_ behind oneDNN's";
  EXPECT_NE(process_sgemm(), blas_sgemm());
}

TEST(OnednnSgemm, LibTorchsProductsRunThroughIt) {
  if (!onednn_sgemm_built()) GTEST_SKIP() << "built with WG_ONEDNN_SGEMM=OFF";
  torch::manual_seed(3);
  const int64_t n = 1024;  // deep enough that the two libraries round differently
  const torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  const torch::Tensor torch_mm = torch::mm(a, b);
  // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ.
  const auto column_major = [&](SgemmFn fn) {
    torch::Tensor c = torch::empty({n, n});
    const int N = int(n);
    const float one = 1, zero = 0;
    fn("N", "N", &N, &N, &N, &one, b.data_ptr<float>(), &N, a.data_ptr<float>(), &N, &zero, c.data_ptr<float>(), &N);
    return c;
  };
  const torch::Tensor ours = column_major(process_sgemm()), blas = column_major(blas_sgemm());
  EXPECT_TRUE(torch::equal(torch_mm, ours));
  EXPECT_FALSE(torch::equal(torch_mm, blas)) << "LibTorch's product has the BLAS's bits: it did not run through oneDNN";
  EXPECT_TRUE(torch::allclose(ours, blas, 1e-4, 1e-3));
  // wg::gemm (row-major, what the attention kernel calls) reaches it too.
  torch::Tensor c = torch::empty({n, n});
  gemm(false, false, n, n, n, 1.0f, a.data_ptr<float>(), n, b.data_ptr<float>(), n, 0.0f, c.data_ptr<float>(), n);
  EXPECT_TRUE(torch::equal(c, torch_mm));
  // A small product (m·n·k at most small_sgemm_limit(), on every CPU) is the BLAS's own, bit for bit.
  ASSERT_LE(int64_t(20) * 16 * 76, small_sgemm_limit());
  const torch::Tensor sa = torch::randn({20, 76}), sb = torch::randn({76, 16});
  torch::Tensor small = torch::empty({20, 16});
  const int M = 20, N = 16, K = 76;
  const float one = 1, zero = 0;
  blas_sgemm()("N", "N", &N, &M, &K, &one, sb.data_ptr<float>(), &N, sa.data_ptr<float>(), &K, &zero,
               small.data_ptr<float>(), &N);
  EXPECT_TRUE(torch::equal(torch::mm(sa, sb), small));
  torch::Tensor via_gemm = torch::empty({20, 16});
  gemm(false, false, 20, 16, 76, 1.0f, sa.data_ptr<float>(), 76, sb.data_ptr<float>(), 16, 0.0f,
       via_gemm.data_ptr<float>(), 16);
  EXPECT_TRUE(torch::equal(via_gemm, small));
}

// The limit is the one for this CPU's vector instructions, and a product
// of exactly that many multiply-adds (a long reduction into a 4 x 4 C,
// which the two libraries sum differently) is still the BLAS's own, bit
// for bit, through the process's sgemm_ and through wg::gemm.
TEST(OnednnSgemm, SmallProductsStayTheBlassUpToTheLimitOfThisCpu) {
  const int64_t limit = small_sgemm_limit();
  ASSERT_EQ(limit, vector_isa() == VectorIsa::Avx512 ? kSmallSgemmAvx512 : kSmallSgemmAvx2);
  ASSERT_NE(blas_sgemm(), nullptr);
  const int M = 4, N = 4, K = int(limit / 16);
  torch::manual_seed(9);
  const torch::Tensor a = torch::randn({M, K}), b = torch::randn({K, N});
  const float one = 1, zero = 0;
  const auto column_major = [&](SgemmFn fn) {  // row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ
    torch::Tensor c = torch::empty({M, N});
    fn("N", "N", &N, &M, &K, &one, b.data_ptr<float>(), &N, a.data_ptr<float>(), &K, &zero, c.data_ptr<float>(), &N);
    return c;
  };
  const torch::Tensor blas = column_major(blas_sgemm());
  EXPECT_TRUE(torch::equal(column_major(process_sgemm()), blas));
  torch::Tensor via_gemm = torch::empty({M, N});
  gemm(false, false, M, N, K, 1.0f, a.data_ptr<float>(), K, b.data_ptr<float>(), N, 0.0f, via_gemm.data_ptr<float>(),
       N);
  EXPECT_TRUE(torch::equal(via_gemm, blas));
}

// Without AVX-512 a weight gradient's long reduction ('N', 'T', k at
// least kLongReductionMin and above m and n, both at least
// kLongReductionMinWidth) is the BLAS's own, bit for bit, as LibTorch's
// linear runs it in backward; the rule leaves other shapes to oneDNN.
TEST(OnednnSgemm, LongReductionsAreTheBlassWithoutAvx512) {
  const bool avx512 = vector_isa() == VectorIsa::Avx512;
  EXPECT_EQ(blas_takes_long_reduction('N', 'T', 256, 768, 7900), !avx512);
  EXPECT_EQ(blas_takes_long_reduction('n', 't', 128, 128, 1024), !avx512);
  EXPECT_FALSE(blas_takes_long_reduction('T', 'N', 256, 768, 7900));  // a forward's or dX's product
  EXPECT_FALSE(blas_takes_long_reduction('N', 'N', 256, 768, 7900));
  EXPECT_FALSE(blas_takes_long_reduction('N', 'T', 256, 768, 1023));   // too short
  EXPECT_FALSE(blas_takes_long_reduction('N', 'T', 1536, 768, 1264));  // k not above m
  EXPECT_FALSE(blas_takes_long_reduction('N', 'T', 64, 768, 7900));    // too narrow
  EXPECT_FALSE(blas_takes_long_reduction('N', 'T', 768, 127, 7900));
  if (avx512) GTEST_SKIP() << "AVX-512: long reductions stay oneDNN's";
  if (!onednn_sgemm_built()) GTEST_SKIP() << "built with WG_ONEDNN_SGEMM=OFF";
  ASSERT_NE(blas_sgemm(), nullptr);
  const int M = 128, N = 160, K = 2048;  // in, out, token rows
  torch::manual_seed(21);
  torch::Tensor x = torch::randn({K, M}, torch::requires_grad()), g = torch::randn({K, N});
  const torch::Tensor w = torch::randn({N, M}, torch::requires_grad());
  torch::linear(x, w).backward(g);
  // dW [N, M] row-major is column-major M x N: x (M x K, 'N') · gᵀ (g stored N x K, 'T').
  torch::Tensor blas = torch::empty({N, M});
  const float one = 1, zero = 0;
  blas_sgemm()("N", "T", &M, &N, &K, &one, x.data_ptr<float>(), &M, g.data_ptr<float>(), &N, &zero,
               blas.data_ptr<float>(), &M);
  EXPECT_TRUE(torch::equal(w.grad(), blas)) << "max difference " << (w.grad() - blas).abs().max().item<float>();
}

// One column-major call on copies of the same operands through the
// process's sgemm_ and the BLAS's; C starts as `c0` ([ldc, n] storage).
struct Case {
  char ta, tb;
  int m, n, k, lda, ldb, ldc;
  float alpha, beta;
};

void expect_as_blas(const Case& t, float c_fill) {
  SCOPED_TRACE(testing::Message() << t.ta << t.tb << " m " << t.m << " n " << t.n << " k " << t.k << " lda " << t.lda
                                  << " ldb " << t.ldb << " ldc " << t.ldc << " alpha " << t.alpha << " beta " << t.beta
                                  << " C " << c_fill);
  const bool plain_a = t.ta == 'N' || t.ta == 'n', plain_b = t.tb == 'N' || t.tb == 'n';
  const int a_cols = plain_a ? t.k : t.m, b_cols = plain_b ? t.n : t.k;  // column-major: columns of the storage
  torch::manual_seed(t.m * 131 + t.n * 17 + t.k);
  const torch::Tensor a = torch::randn({std::max(1, a_cols) * t.lda}), b = torch::randn({std::max(1, b_cols) * t.ldb});
  const torch::Tensor c0 = torch::full({std::max(1, t.n) * t.ldc}, c_fill);
  const auto run = [&](SgemmFn fn) {
    torch::Tensor c = c0.clone();
    fn(&t.ta, &t.tb, &t.m, &t.n, &t.k, &t.alpha, a.data_ptr<float>(), &t.lda, b.data_ptr<float>(), &t.ldb, &t.beta,
       c.data_ptr<float>(), &t.ldc);
    return c;
  };
  const torch::Tensor ours = run(process_sgemm()), blas = run(blas_sgemm());
  EXPECT_EQ(ours.isnan().sum().item<int64_t>(), blas.isnan().sum().item<int64_t>());
  // float rounding only: sums of k products of N(0, 1) values, summed in another order
  EXPECT_TRUE(torch::allclose(ours, blas, 1e-5, 1e-6 * (t.k + 10), /*equal_nan=*/true))
      << "max difference " << (ours - blas).abs().nan_to_num(0).max().item<float>();
}

TEST(OnednnSgemm, GivesWhatTheBlasGivesInEveryCaseBlasDefines) {
  ASSERT_NE(blas_sgemm(), nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char ta : {'N', 'T'})
    for (const char tb : {'N', 'T'}) {
      // leading dimensions: exact, and 3 wider than the rows
      // through oneDNN (m·n·k above small_sgemm_limit()), and small ones
      // through the BLAS (the second on AVX-512 CPUs, whose limit is 64³)
      for (const auto& [m, n, k] : {std::tuple{67, 59, 83}, std::tuple{37, 53, 29}})
        for (const int pad : {0, 3}) {
          const int lda = (ta == 'N' ? m : k) + pad, ldb = (tb == 'N' ? k : n) + pad, ldc = m + pad;
          expect_as_blas({ta, tb, m, n, k, lda, ldb, ldc, 1.0f, 0.0f}, nan);  // beta 0: C is not read
          expect_as_blas({ta, tb, m, n, k, lda, ldb, ldc, 0.5f, 1.0f}, 2.0f);
          expect_as_blas({ta, tb, m, n, k, lda, ldb, ldc, -1.5f, 0.25f}, 2.0f);
        }
      expect_as_blas({ta, tb, 300, 200, 500, ta == 'N' ? 300 : 500, tb == 'N' ? 500 : 200, 300, 1.0f, 0.0f}, nan);
    }
  // oneDNN's copy path (m and n above about 1000, or a leading dimension a
  // multiple of 256): transposes, leading dimensions 3 wider, and 256 wide.
  for (const char ta : {'N', 'T'})
    for (const char tb : {'N', 'T'}) {
      const int m = 1100, n = 1030, k = 40;
      expect_as_blas({ta, tb, m, n, k, (ta == 'N' ? m : k) + 3, (tb == 'N' ? k : n) + 3, m + 3, 1.0f, 0.0f}, nan);
      expect_as_blas({ta, tb, m, n, k, (ta == 'N' ? m : k) + 3, (tb == 'N' ? k : n) + 3, m + 3, 0.5f, 0.5f}, 2.0f);
    }
  expect_as_blas({'N', 'N', 200, 180, 256, 256, 256, 256, 1.0f, 0.0f}, nan);
  expect_as_blas({'T', 'N', 200, 180, 250, 256, 256, 256, 2.0f, 1.0f}, 1.0f);
  // alpha 0 and beta 0 write zeros over NaN (oneDNN's copy path would keep the NaN).
  expect_as_blas({'N', 'N', 1100, 1030, 40, 1100, 40, 1100, 0.0f, 0.0f}, nan);
  // Lowercase transposes, as LibTorch passes them.
  expect_as_blas({'n', 't', 67, 59, 83, 67, 59, 67, 1.0f, 0.0f}, nan);
  // An empty product (k = 0) scales C by beta, and beta 0 clears it, NaN included.
  expect_as_blas({'N', 'N', 5, 4, 0, 5, 1, 5, 1.0f, 2.0f}, 3.0f);
  expect_as_blas({'N', 'N', 5, 4, 0, 5, 1, 5, 1.0f, 0.0f}, nan);
  // An empty C is left as it is.
  expect_as_blas({'N', 'N', 0, 4, 3, 1, 3, 1, 1.0f, 0.0f}, 7.0f);
  expect_as_blas({'N', 'N', 5, 0, 3, 5, 3, 5, 1.0f, 0.0f}, 7.0f);
  // alpha 0: C = beta · C.
  expect_as_blas({'N', 'N', 66, 67, 68, 66, 68, 66, 0.0f, 3.0f}, 1.0f);
}

TEST(OnednnSgemm, SameBitsOnOneAndTwoThreadsAndInsideAParallelRegion) {
  torch::manual_seed(5);
  // dW's shape: a long reduction into a small C (rows by rows of a batch)
  const torch::Tensor g = torch::randn({4000, 96}), x = torch::randn({4000, 80});
  at::set_num_threads(1);
  const torch::Tensor one = torch::mm(g.t(), x);
  at::set_num_threads(2);
  const torch::Tensor two = torch::mm(g.t(), x);
  EXPECT_TRUE(torch::equal(one, two));
  std::vector<torch::Tensor> inside(4);
  at::parallel_for(0, 4, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) inside[size_t(i)] = torch::mm(g.t(), x);
  });
  for (const torch::Tensor& t : inside) EXPECT_TRUE(torch::equal(t, two));
}

}  // namespace
}  // namespace wg
