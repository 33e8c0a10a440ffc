// Single-precision matrix products through oneDNN: the process-wide
// sgemm_ that LibTorch's CPU products and wg::gemm (blas.h) bind to; see
// src/util/onednn_sgemm.cpp for why it exists. No LibTorch in this header.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

// Products of at most this many multiply-adds (m·n·k) stay the BLAS's:
// its small-matrix kernels take a fraction of oneDNN's time a call there.
inline constexpr int64_t kSmallSgemm = int64_t(64) * 64 * 64;

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
