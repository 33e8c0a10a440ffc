// Row-major matrix products straight through the process's BLAS (the
// sgemm_/dgemm_ that LibTorch itself links, found with dlsym), for kernels
// that multiply many small matrices lying inside larger tensors: ATen's
// products on CPU pay several microseconds of bookkeeping per call and read
// only dense or simply strided operands, so a kernel would first copy each
// matrix out. Here each operand is a pointer and a leading dimension (the
// distance between its rows), so a head's rows inside packed [rows, heads,
// head width] tensors are read and written where they lie. No LibTorch in
// this header.
#pragma once

#include <cstdint>

namespace wg {

// True when the process has a BLAS with sgemm_ and dgemm_ (Debian's
// LibTorch does; a build without one makes callers fall back to ATen).
bool blas_available();

// C = alpha · op(A) · op(B) + beta · C, all row-major: op(A) is m×k (A
// stored k×m when trans_a), op(B) k×n (n×k when trans_b), C m×n; row i of
// A starts at a + i·lda, and so on. Call only when blas_available().
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace wg
