// Single-precision matrix products through oneDNN: the process-wide
// sgemm_ that LibTorch's CPU products and wg::gemm (blas.h) bind to; see
// src/util/onednn_sgemm.cpp for why it exists. No LibTorch in this header.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

// Products of at most small_sgemm_limit() multiply-adds (m·n·k) stay the
// BLAS's; larger ones go to oneDNN. Decided once, by the CPU's vector
// instructions (vector_isa.h), so every product of a shape takes one
// library for the whole run:
// - AVX-512: 64³. OpenBLAS 0.3.21 has small-matrix kernels there
//   (SkylakeX), which took a fraction of oneDNN's time a call up to about
//   64³ (docs/benchmarks.md, "float32 products through oneDNN");
// - otherwise (measured on an AMD EPYC with AVX2, where OpenBLAS packs the
//   operands of every product): kSmallSgemmAvx2, above which oneDNN ran
//   the attention kernel's per-head products 1.2-1.7x faster on one
//   thread, and below which OpenBLAS was as fast or faster (cells of a few
//   points: 2-4x).
inline constexpr int64_t kSmallSgemmAvx512 = int64_t(64) * 64 * 64;
inline constexpr int64_t kSmallSgemmAvx2 = int64_t(32) * 32 * 24;
int64_t small_sgemm_limit();

// On a CPU without AVX-512, a weight gradient's long reduction is the
// BLAS's too: the column-major call ('N', 'T') whose k (the token rows)
// is at least kLongReductionMin and above m and n, with m and n (the
// layer's widths) at least kLongReductionMinWidth. On an AMD EPYC with
// AVX2, OpenBLAS took 0.73-0.99 of oneDNN's time on 30 of the 32 such
// shapes of cpu_wide (k of 1,264 to 8,927 rows into 256 to 768 wide C;
// within 3 % on the other two, 256 x 256), about 4 % of the step in it
// (docs/benchmarks.md, "Long reductions on the BLAS"); on AVX-512 oneDNN
// was the faster on them ("float32 products through oneDNN"), so there
// they stay oneDNN's.
inline constexpr int64_t kLongReductionMin = 1024, kLongReductionMinWidth = 128;
bool blas_takes_long_reduction(char transa, char transb, int64_t m, int64_t n, int64_t k);

// True when this build routes sgemm_ through oneDNN (CMake option
// WG_ONEDNN_SGEMM, on by default; Debian's libdnnl-dev).
bool onednn_sgemm_built();

// True when the process's sgemm_, as LibTorch and wg::gemm bind it, is the
// one below: the executable exports it. False: products run on the BLAS
// (OpenBLAS).
bool onednn_sgemm_active();

// Which library runs float32 products, for logs and benchmark records:
// "onednn 2.6.3" or "blas".
std::string sgemm_provider();

// The BLAS's own sgemm_ (Fortran interface): the one behind oneDNN's where
// that is active, else the process's. Null where the process has none.
using SgemmFn = void (*)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                         const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                         const float* beta, float* c, const int* ldc);
SgemmFn blas_own_sgemm();

}  // namespace wg
