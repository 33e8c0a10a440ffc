// Small float products on one thread, AVX-512 (see header; the AVX2
// build is small_gemm_avx2.cpp), and the choice between the builds.
//
// C is worked through in blocks of up to 64 columns (V vectors of 16).
// op(B) is copied once per block into a panel on the stack ([k, 16 V],
// zero past the block's width): its rows, or, when B is given transposed,
// its columns gathered. Register tiles of R rows x V vectors
// run over them: per k, V loads of B, R broadcasts of A and R·V fused
// multiply-adds. Each tile is written, scaled, straight into C with
// masked stores. k is taken in slices of kMaxK (the panel's depth), the
// later ones added. Every sum runs over k in order with one FMA a step,
// so a product's bits depend only on its operands.
#include "wg/model/small_gemm.h"

#include <immintrin.h>

#include "small_gemm_kernels.h"

#include <algorithm>

#include "wg/util/onednn_sgemm.h"
#include "wg/util/vector_isa.h"

#define WG_AVX512 __attribute__((target("avx512f")))
#define WG_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline

namespace wg {
namespace {

constexpr int64_t kMaxK = 256;  // a panel's depth: 256 x 64 floats, 64 KiB of stack
constexpr int kRows = 6;        // a tile's rows: 6 x 4 sums, 4 of B and 1 broadcast in 32 registers
constexpr int kMaxV = 4;        // a block's vectors (64 columns)

// op(A)[i, p] = a[i · si + p · sp]; op(B)[p, j] = b[p · ld + j] over the
// block's columns, from the panel (zero past the block's width, so its
// rows are read whole).
struct Operands {
  const float* a;
  int64_t si, sp;
  const float* b;
  int64_t ld;
  __mmask16 last;  // the block's last vector: its valid columns of C
};

WG_AVX512_INLINE __mmask16 mask_of(int v, int V, __mmask16 last) { return v == V - 1 ? last : __mmask16(0xFFFF); }

// Rows [i, i + R) of C's block from k steps [0, depth): C = alpha · Σ +
// beta · C.
template <int R, int V>
WG_AVX512_INLINE void tile(const Operands& o, int64_t i, int64_t depth, float alpha, float beta, float* c,
                           int64_t ldc) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  const float* a = o.a + i * o.si;
  for (int64_t p = 0; p < depth; ++p) {
    __m512 b[V];
    const float* row = o.b + p * o.ld;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_ps(row + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * o.si + p * o.sp]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __mmask16 mask = mask_of(v, V, o.last);
      float* to = c + (i + r) * ldc + 16 * v;
      __m512 y = _mm512_mul_ps(va, acc[r][v]);
      if (beta != 0.0f) y = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, to), y);
      _mm512_mask_storeu_ps(to, mask, y);
    }
}

// All m rows of a block: tiles of kRows, then one of the rest.
template <int V>
WG_AVX512_INLINE void block_rows(const Operands& o, int64_t m, int64_t depth, float alpha, float beta, float* c,
                                 int64_t ldc) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) tile<kRows, V>(o, i, depth, alpha, beta, c, ldc);
  switch (m - i) {
    case 0:
      return;
    case 1:
      return tile<1, V>(o, i, depth, alpha, beta, c, ldc);
    case 2:
      return tile<2, V>(o, i, depth, alpha, beta, c, ldc);
    case 3:
      return tile<3, V>(o, i, depth, alpha, beta, c, ldc);
    case 4:
      return tile<4, V>(o, i, depth, alpha, beta, c, ldc);
    default:
      return tile<5, V>(o, i, depth, alpha, beta, c, ldc);
  }
}

// op(B)[p, j0 + j] = b[(j0 + j) · ldb + p] for p < depth, j < 16 · vectors
// (masked past the block's width) into panel rows of 16 · vectors.
WG_AVX512_INLINE void gather_panel(const float* b, int64_t ldb, int64_t j0, int64_t depth, int vectors, __mmask16 last,
                                   float* panel) {
  const int64_t ld = 16 * int64_t(vectors);
  for (int v = 0; v < vectors; ++v) {
    const __mmask16 mask = mask_of(v, vectors, last);
    const float* first = b + (j0 + 16 * v) * ldb;  // column 16 v's row of B
    if (ldb <= (int64_t(1) << 26)) {               // the lanes' offsets in int32
      const __m512i offsets = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                 _mm512_set1_epi32(int32_t(ldb)));
      for (int64_t p = 0; p < depth; ++p)
        _mm512_storeu_ps(panel + p * ld + 16 * v,
                         _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, offsets, first + p, 4));
    } else {
      for (int64_t p = 0; p < depth; ++p)
        for (int l = 0; l < 16; ++l) panel[p * ld + 16 * v + l] = (mask >> l) & 1 ? first[l * ldb + p] : 0.0f;
    }
  }
}

// op(B)[p, j] = b[p · ldb + j] for p < depth, j < 16 · vectors (zero past
// the block's width) into panel rows of 16 · vectors. Read in place, the
// rows of a head's v or k lie 1 or 3 KiB apart in the projections, so the
// 79 rows of the embed's products share a few of L1's sets and were
// fetched again for every tile of rows (rows placed 16 floats further
// apart ran as fast as the panel). From the panel, the embed's 79 x 32 x 79
// products ran at 140-156 GFLOP/s a thread instead of 89-105 (operands in
// cache), and the embed's attention core 4.5 % faster on one thread. The
// panel holds the same values, so the bits do not change.
WG_AVX512_INLINE void copy_panel(const float* b, int64_t ldb, int64_t depth, int vectors, __mmask16 last,
                                 float* panel) {
  const int64_t ld = 16 * int64_t(vectors);
  for (int64_t p = 0; p < depth; ++p)
    for (int v = 0; v < vectors; ++v)
      _mm512_storeu_ps(panel + p * ld + 16 * v, _mm512_maskz_loadu_ps(mask_of(v, vectors, last), b + p * ldb + 16 * v));
}

}  // namespace

namespace small_gemm_kernels {

WG_AVX512 void avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  alignas(64) float panel[kMaxK * 16 * kMaxV];
  for (int64_t j0 = 0; j0 < n; j0 += 16 * kMaxV) {
    const int64_t width = std::min<int64_t>(16 * kMaxV, n - j0);
    const int vectors = int((width + 15) / 16);
    const int tail = int(width - 16 * (vectors - 1));
    const __mmask16 last = __mmask16((uint32_t(1) << tail) - 1);
    for (int64_t p0 = 0; p0 < k; p0 += kMaxK) {
      const int64_t depth = std::min(kMaxK, k - p0);
      const Operands o{a + (trans_a ? p0 * lda : p0), trans_a ? 1 : lda, trans_a ? lda : 1, panel, 16 * vectors, last};
      if (trans_b) {
        gather_panel(b + p0, ldb, j0, depth, vectors, last, panel);
      } else {
        copy_panel(b + p0 * ldb + j0, ldb, depth, vectors, last, panel);
      }
      const float b_scale = p0 == 0 ? beta : 1.0f;
      float* cj = c + j0;
      switch (vectors) {
        case 1:
          block_rows<1>(o, m, depth, alpha, b_scale, cj, ldc);
          break;
        case 2:
          block_rows<2>(o, m, depth, alpha, b_scale, cj, ldc);
          break;
        case 3:
          block_rows<3>(o, m, depth, alpha, b_scale, cj, ldc);
          break;
        default:
          block_rows<4>(o, m, depth, alpha, b_scale, cj, ldc);
          break;
      }
    }
  }
}

}  // namespace small_gemm_kernels

bool small_gemm_takes(int64_t lq, int64_t lk, int64_t dh) {
  return std::min(lq, lk) >= 16 && lq * lk * dh <= small_sgemm_limit();
}

bool small_gemm_runs(VectorIsa isa) {
  const VectorIsa cpu = vector_isa();
  switch (isa) {
    case VectorIsa::Avx512: return cpu == VectorIsa::Avx512;
    case VectorIsa::Avx2: return cpu != VectorIsa::Base;  // AVX-512 F and DQ CPUs run AVX2 with FMA too
    case VectorIsa::Base: break;
  }
  return false;
}

std::vector<VectorIsa> small_gemm_builds() {
  std::vector<VectorIsa> out;
  for (const VectorIsa isa : {VectorIsa::Avx512, VectorIsa::Avx2})
    if (small_gemm_runs(isa)) out.push_back(isa);
  return out;
}

bool small_gemm_on(VectorIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (!small_gemm_runs(isa)) return false;
  if (m <= 0 || n <= 0) return true;
  // C = beta · C where alpha · op(A) · op(B) is an empty sum or, as BLAS,
  // alpha is 0: A and B not read (a NaN there does not come through).
  if (k <= 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return true;
  }
  if (isa == VectorIsa::Avx512) {
    small_gemm_kernels::avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    small_gemm_kernels::avx2(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  return true;
}

bool small_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return small_gemm_on(vector_isa(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace wg
