// The attention kernel's small products (wg/model/small_gemm.h), each
// build the CPU runs (AVX-512, AVX2): every transpose, shapes across the
// register tiles' edges (rows of 6, vectors of 16 and 8, blocks of 64 and
// 16 columns, slices of 256 and 512 deep), strided operands,
// alpha and beta, against a double-precision product; C's padding between
// rows untouched; beta 0 overwriting a NaN; a row's bits the same whatever rows come with it.
// The attention kernel's own tests (test_attention_core.cpp) check the
// products in place against the reference attention.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "wg/model/small_gemm.h"
#include "wg/util/vector_isa.h"

namespace wg {
namespace {

struct Shape {
  bool ta, tb;
  int64_t m, n, k;
};

// Row-major operands of `s` with leading dimensions a few elements past
// their widths (as a head's rows inside packed projections), filled with
// N(0, 1); C filled with `c_fill`.
struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c;
  Operands(const Shape& s, float c_fill, std::mt19937& gen) {
    lda = (s.ta ? s.m : s.k) + 3;
    ldb = (s.tb ? s.k : s.n) + 5;
    ldc = s.n + 7;
    std::normal_distribution<float> normal;
    a.resize(size_t((s.ta ? s.k : s.m) * lda));
    b.resize(size_t((s.tb ? s.n : s.k) * ldb));
    for (float& x : a) x = normal(gen);
    for (float& x : b) x = normal(gen);
    c.assign(size_t(s.m * ldc), c_fill);
  }
  float A(const Shape& s, int64_t i, int64_t p) const { return s.ta ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)]; }
  float B(const Shape& s, int64_t p, int64_t j) const { return s.tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]; }
};

// The builds this CPU runs; none where it has neither (BLAS then takes every product).
std::vector<VectorIsa> builds() {
  switch (vector_isa()) {
    case VectorIsa::Avx512: return {VectorIsa::Avx512, VectorIsa::Avx2};
    case VectorIsa::Avx2: return {VectorIsa::Avx2};
    case VectorIsa::Base: break;
  }
  return {};
}
const char* name(VectorIsa isa) { return isa == VectorIsa::Avx512 ? "AVX-512" : "AVX2"; }
#define SKIP_WITHOUT_A_BUILD() \
  if (builds().empty()) GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2: the attention kernel uses BLAS"

bool run(VectorIsa isa, const Shape& s, float alpha, const Operands& o, float beta, std::vector<float>& c) {
  return small_gemm_on(isa, s.ta, s.tb, s.m, s.n, s.k, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, beta, c.data(),
                       o.ldc);
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1},
                                                                       {5, 15, 3},
                                                                       {6, 16, 16},
                                                                       {7, 17, 31},
                                                                       {13, 33, 8},
                                                                       {79, 79, 32},
                                                                       {79, 32, 79},
                                                                       {12, 64, 64},
                                                                       {25, 65, 40},
                                                                       {19, 130, 9},
                                                                       {9, 20, 300},
                                                                       {3, 48, 513},
                                                                       {8, 24, 1030},
                                                                       // a last tile of each height, under
                                                                       // 1 to 4 vectors
                                                                       {10, 40, 9},
                                                                       {2, 30, 5},
                                                                       {4, 33, 17},
                                                                       {14, 64, 7},
                                                                       {11, 50, 20},
                                                                       {9, 60, 12},
                                                                       {10, 56, 5}})
        out.push_back({ta, tb, m, n, k});
  return out;
}

TEST(SmallGemm, MatchesADoublePrecisionProductForEveryTransposeAndEdge) {
  SKIP_WITHOUT_A_BUILD();
  std::mt19937 gen(7);
  for (const VectorIsa isa : builds())
    for (const Shape& s : shapes())
      for (const float beta : {0.0f, 1.0f, -0.5f}) {
        const float alpha = 0.37f, fill = 0.25f;
        Operands o(s, fill, gen);
        std::vector<float> c = o.c;
        ASSERT_TRUE(run(isa, s, alpha, o, beta, c));
        double worst = 0;
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t j = 0; j < s.n; ++j) {
            double sum = 0, magnitude = 0;
            for (int64_t p = 0; p < s.k; ++p) {
              sum += double(o.A(s, i, p)) * double(o.B(s, p, j));
              magnitude += std::abs(double(o.A(s, i, p)) * double(o.B(s, p, j)));
            }
            const double want = alpha * sum + beta * fill;
            // float sums over k: within k · 2^-24 of the terms' magnitude, with room
            const double bound = 4e-7 * double(s.k + 2) * (std::abs(alpha) * magnitude + std::abs(beta * fill)) + 1e-30;
            worst = std::max(worst, std::abs(double(c[size_t(i * o.ldc + j)]) - want) / bound);
          }
          for (int64_t j = s.n; j < o.ldc; ++j)  // the padding after row i's columns
            ASSERT_EQ(c[size_t(i * o.ldc + j)], fill) << name(isa) << ": row " << i << " column " << j << " past n";
        }
        EXPECT_LE(worst, 1.0) << name(isa) << ": m " << s.m << " n " << s.n << " k " << s.k << " ta " << s.ta << " tb "
                              << s.tb << " beta " << beta;
      }
}

TEST(SmallGemm, BetaZeroOverwritesWhatCHeld) {
  SKIP_WITHOUT_A_BUILD();
  std::mt19937 gen(3);
  for (const VectorIsa isa : builds())
    for (const Shape& s : {Shape{false, true, 79, 79, 32}, Shape{true, false, 7, 33, 5}}) {
      Operands o(s, std::numeric_limits<float>::quiet_NaN(), gen);
      std::vector<float> c = o.c;
      ASSERT_TRUE(run(isa, s, 1.0f, o, 0.0f, c));
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j)
          ASSERT_TRUE(std::isfinite(c[size_t(i * o.ldc + j)])) << name(isa) << ": " << i << ", " << j;
    }
}

TEST(SmallGemm, AlphaZeroReadsNeitherOperand) {
  SKIP_WITHOUT_A_BUILD();
  std::mt19937 gen(17);
  const Shape s{false, true, 7, 19, 9};
  Operands o(s, 2.0f, gen);
  o.a[0] = std::numeric_limits<float>::quiet_NaN();
  o.b[0] = std::numeric_limits<float>::infinity();
  for (const VectorIsa isa : builds()) {
    std::vector<float> c = o.c;
    ASSERT_TRUE(run(isa, s, 0.0f, o, 0.5f, c));
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j)
        ASSERT_EQ(c[size_t(i * o.ldc + j)], 1.0f) << name(isa) << ": " << i << ", " << j;
  }
}

TEST(SmallGemm, AnEmptySumScalesC) {
  SKIP_WITHOUT_A_BUILD();
  std::mt19937 gen(5);
  const Shape s{false, false, 3, 4, 0};
  Operands o(s, 2.0f, gen);
  for (const VectorIsa isa : builds()) {
    std::vector<float> c = o.c;
    ASSERT_TRUE(run(isa, s, 1.0f, o, 0.5f, c));
    EXPECT_EQ(c[0], 1.0f) << name(isa);
    c = o.c;
    ASSERT_TRUE(run(isa, s, 1.0f, o, 0.0f, c));
    EXPECT_EQ(c[size_t(2 * o.ldc + 3)], 0.0f) << name(isa);
  }
}

// The attention kernel cuts a long sequence's query rows into blocks:
// each element's sum runs over k in the same order whatever the tile its
// row falls in, so a row computed alone has the bits it has among others.
TEST(SmallGemm, ARowHasTheSameBitsAloneAsAmongOthers) {
  SKIP_WITHOUT_A_BUILD();
  std::mt19937 gen(11);
  for (const VectorIsa isa : builds())
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const int64_t k : {32, 600}) {  // 600: more than one slice of the panel's depth
          const Shape s{ta, tb, 71, 71, k};
          Operands o(s, 0.0f, gen);
          std::vector<float> together = o.c, alone = o.c;
          ASSERT_TRUE(run(isa, s, 0.17f, o, 0.0f, together));
          for (int64_t i = 0; i < s.m; ++i) {
            const float* a_row = o.a.data() + (ta ? i : i * o.lda);
            ASSERT_TRUE(small_gemm_on(isa, ta, tb, 1, s.n, s.k, 0.17f, a_row, o.lda, o.b.data(), o.ldb, 0.0f,
                                      alone.data() + i * o.ldc, o.ldc));
          }
          EXPECT_EQ(together, alone) << name(isa) << ": ta " << ta << " tb " << tb << " k " << k;
        }
}

// small_gemm runs the build of the CPU's widest instruction set.
TEST(SmallGemm, RunsTheCpusWidestBuild) {
  EXPECT_EQ(small_gemm_builds(), builds());
  EXPECT_FALSE(small_gemm_runs(VectorIsa::Base));
  SKIP_WITHOUT_A_BUILD();
  std::mt19937 gen(13);
  const Shape s{false, true, 16, 16, 8};
  Operands o(s, 0.0f, gen);
  std::vector<float> widest = o.c, chosen = o.c;
  ASSERT_TRUE(run(builds().front(), s, 1.0f, o, 0.0f, widest));
  ASSERT_TRUE(
      small_gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f, chosen.data(), o.ldc));
  EXPECT_EQ(chosen, widest);
  EXPECT_FALSE(small_gemm_on(VectorIsa::Base, s.ta, s.tb, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb,
                             0.0f, chosen.data(), o.ldc));
}

}  // namespace
}  // namespace wg
