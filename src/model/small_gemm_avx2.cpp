// Small float products on one thread, AVX2 with FMA (see small_gemm.h;
// the AVX-512 build, small_gemm.cpp, is the same design with vectors of
// 16 and blocks of 64 columns).
//
// C is worked through in blocks of up to 16 columns (V vectors of 8).
// op(B) is copied once per block into a panel on the stack ([k, 8 V],
// zero past the block's width): its rows, or, when B is given transposed,
// its columns. Register tiles of R rows x V vectors run over them: per k,
// V loads of B, R broadcasts of A and R·V fused multiply-adds (6 x 2 sums,
// 2 of B and 1 broadcast in 16 registers). Each tile is written, scaled,
// straight into C with masked stores past the block's width. k is taken
// in slices of kMaxK (the panel's depth), the later ones added. Every sum
// runs over its slice of k in order with one FMA a step.
#include "small_gemm_kernels.h"

#include <immintrin.h>

#include <algorithm>

#define WG_AVX2 __attribute__((target("avx2,fma")))
#define WG_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace wg::small_gemm_kernels {
namespace {

constexpr int64_t kMaxK = 512;  // a panel's depth: 512 x 16 floats, 32 KiB of stack
constexpr int kRows = 6;        // a tile's rows
constexpr int kMaxV = 2;        // a block's vectors (16 columns)

// op(A)[i, p] = a[i · si + p · sp]; op(B)[p, j] = b[p · ld + j] over the
// block's columns, from the panel.
struct Operands {
  const float* a;
  int64_t si, sp;
  const float* b;
  int64_t ld;
  __m256i last;  // the block's last vector: its valid columns of C (lanes with the sign bit set)
  bool partial;  // the last vector has fewer than 8 valid columns
};

WG_AVX2_INLINE __m256i lanes_below(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Rows [i, i + R) of C's block from k steps [0, depth): C = alpha · Σ + beta · C.
template <int R, int V>
WG_AVX2_INLINE void tile(const Operands& o, int64_t i, int64_t depth, float alpha, float beta, float* c, int64_t ldc) {
  __m256 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  const float* a = o.a + i * o.si;
  for (int64_t p = 0; p < depth; ++p) {
    __m256 b[V];
    const float* row = o.b + p * o.ld;
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) b[v] = _mm256_load_ps(row + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * o.si + p * o.sp);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  // Masked stores only where a vector is partial: on AMD's Zen a masked
  // store costs many cycles, and every store masked took the embed's Q Kᵀ
  // (79 x 79 x 32, 14 tiles a block of 32 steps) from 73 to 46 GFLOP/s.
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      float* to = c + (i + r) * ldc + 8 * v;
      __m256 y = _mm256_mul_ps(va, acc[r][v]);
      if (v == V - 1 && o.partial) {
        if (beta != 0.0f) y = _mm256_fmadd_ps(vb, _mm256_maskload_ps(to, o.last), y);
        _mm256_maskstore_ps(to, o.last, y);
      } else {
        if (beta != 0.0f) y = _mm256_fmadd_ps(vb, _mm256_loadu_ps(to), y);
        _mm256_storeu_ps(to, y);
      }
    }
}

// All m rows of a block: tiles of kRows, then one of the rest.
template <int V>
WG_AVX2_INLINE void block_rows(const Operands& o, int64_t m, int64_t depth, float alpha, float beta, float* c,
                               int64_t ldc) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) tile<kRows, V>(o, i, depth, alpha, beta, c, ldc);
  switch (m - i) {
    case 0: return;
    case 1: return tile<1, V>(o, i, depth, alpha, beta, c, ldc);
    case 2: return tile<2, V>(o, i, depth, alpha, beta, c, ldc);
    case 3: return tile<3, V>(o, i, depth, alpha, beta, c, ldc);
    case 4: return tile<4, V>(o, i, depth, alpha, beta, c, ldc);
    default: return tile<5, V>(o, i, depth, alpha, beta, c, ldc);
  }
}

// r[i][j] <- r[j][i]: rows of 8 made columns.
WG_AVX2_INLINE void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// op(B)[p, j] for p < depth, j < width (zero up to 8 · vectors) into panel
// rows of 8 · vectors: B's rows (copied) or, transposed, its columns.
WG_AVX2_INLINE void fill_panel(bool trans_b, const float* b, int64_t ldb, int64_t depth, int64_t width, int vectors,
                               __m256i last, float* panel) {
  const int64_t ld = 8 * int64_t(vectors);
  if (!trans_b) {
    const bool partial = width < ld;
    for (int64_t p = 0; p < depth; ++p)
      for (int v = 0; v < vectors; ++v) {
        const float* from = b + p * ldb + 8 * v;
        _mm256_store_ps(panel + p * ld + 8 * v,
                        v == vectors - 1 && partial ? _mm256_maskload_ps(from, last) : _mm256_loadu_ps(from));
      }
    return;
  }
  // Column j of op(B) is row j of B: 8 of them, 8 deep at a time, through
  // an 8 x 8 transpose in registers (copied one by one, the panel took a
  // fifth of a 64 x 64 x 64 product's time); the rest one by one.
  for (int v = 0; v < vectors; ++v) {
    const int64_t j0 = 8 * int64_t(v), cols = std::min<int64_t>(8, width - j0);
    int64_t p = 0;
    if (cols == 8)
      for (; p + 8 <= depth; p += 8) {
        __m256 r[8];
        for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(b + (j0 + j) * ldb + p);
        transpose8(r);
        for (int q = 0; q < 8; ++q) _mm256_store_ps(panel + (p + q) * ld + j0, r[q]);
      }
    for (; p < depth; ++p)
      for (int64_t j = 0; j < 8; ++j) panel[p * ld + j0 + j] = j < cols ? b[(j0 + j) * ldb + p] : 0.0f;
  }
}

}  // namespace

WG_AVX2 void avx2(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  alignas(32) float panel[kMaxK * 8 * kMaxV];
  for (int64_t j0 = 0; j0 < n; j0 += 8 * kMaxV) {
    const int64_t width = std::min<int64_t>(8 * kMaxV, n - j0);
    const int vectors = int((width + 7) / 8);
    const __m256i last = lanes_below(int(width - 8 * (vectors - 1)));
    for (int64_t p0 = 0; p0 < k; p0 += kMaxK) {
      const int64_t depth = std::min(kMaxK, k - p0);
      const Operands o{a + (trans_a ? p0 * lda : p0),
                       trans_a ? 1 : lda,
                       trans_a ? lda : 1,
                       panel,
                       8 * vectors,
                       last,
                       width < 8 * vectors};
      fill_panel(trans_b, trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0, ldb, depth, width, vectors, last, panel);
      const float b_scale = p0 == 0 ? beta : 1.0f;
      float* cj = c + j0;
      if (vectors == 1) {
        block_rows<1>(o, m, depth, alpha, b_scale, cj, ldc);
      } else {
        block_rows<2>(o, m, depth, alpha, b_scale, cj, ldc);
      }
    }
  }
}

}  // namespace wg::small_gemm_kernels
