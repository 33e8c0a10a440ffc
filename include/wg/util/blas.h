// Row-major matrix products straight through the process's BLAS (the
// sgemm_/dgemm_ that LibTorch itself links, found with dlsym), for kernels
// that multiply many small matrices: ATen's bmm on CPU runs each batch item
// as a separate addmm on tensor views, several microseconds of bookkeeping
// per item, which for attention over small cells costs more than the
// arithmetic. No LibTorch in this header.
#pragma once

#include <cstdint>

namespace wg {

// True when the process has a BLAS with sgemm_ and dgemm_ (Debian's
// LibTorch does; a build without one makes callers fall back to ATen).
bool blas_available();

// For b in [0, batch): C_b = alpha · op(A_b) · op(B_b) + beta · C_b, where
// each operand holds its batch of row-major matrices back to back (A_b
// m·k elements after A_{b-1}, and so on); op(A_b) is m×k (A_b stored k×m when trans_a), op(B_b) k×n (n×k
// when trans_b), C_b m×n. Call only when blas_available().
void batched_gemm(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const float* b, float beta, float* c);
void batched_gemm(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k, double alpha,
                  const double* a, const double* b, double beta, double* c);

}  // namespace wg
