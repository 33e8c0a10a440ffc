// The two builds of small_gemm's kernel (wg/model/small_gemm.h), one per
// vector instruction set; small_gemm.cpp picks one, and handles the empty
// and alpha-0 products itself (m, n and k here are at least 1). Each sums every
// element over k in order with one fused multiply-add a step, in slices of
// the build's panel depth (256 deep on AVX-512, 512 on AVX2), each slice
// scaled by alpha and added to C in turn, so a product's bits depend only
// on its operands and the build (the builds differ past 256 deep).
#pragma once

#include <cstdint>

namespace wg::small_gemm_kernels {

// AVX-512 F: register tiles of 6 rows x up to 4 vectors of 16 (small_gemm.cpp).
void avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// AVX2 with FMA: register tiles of 6 rows x up to 2 vectors of 8 (small_gemm_avx2.cpp).
void avx2(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace wg::small_gemm_kernels
