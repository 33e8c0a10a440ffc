// Matrix products through BLAS (see header).
//
// BLAS is column-major: a row-major C = op(A) · op(B) is the column-major
// Cᵀ = op(B)ᵀ · op(A)ᵀ, so the operands are passed swapped, each with its
// row-major leading dimension. The functions are looked up once (the
// statics below are written once, on first use, and only read after).
#include "wg/util/blas.h"

#include <dlfcn.h>

#include <stdexcept>

#include "wg/util/onednn_sgemm.h"

namespace wg {
namespace {

template <typename T>
using GemmFn = void (*)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                        const T* alpha, const T* a, const int* lda, const T* b, const int* ldb, const T* beta, T* c,
                        const int* ldc);

struct Blas {
  GemmFn<float> sgemm = nullptr, sgemm_small = nullptr;
  GemmFn<double> dgemm = nullptr;
};

const Blas& blas() {
  static const Blas found = [] {
    Blas b;
    b.sgemm = reinterpret_cast<GemmFn<float>>(dlsym(RTLD_DEFAULT, "sgemm_"));
    // Where the executable's sgemm_ is oneDNN's (onednn_sgemm.cpp), it
    // hands small products on to the BLAS's own; the attention kernel
    // makes tens of thousands of them a call (cells of a few points), so
    // they go there directly: the extra hop made its cell cores about a
    // fifth slower (docs/benchmarks.md).
    b.sgemm_small = blas_own_sgemm();
    b.dgemm = reinterpret_cast<GemmFn<double>>(dlsym(RTLD_DEFAULT, "dgemm_"));
    return b;
  }();
  return found;
}

template <typename T>
void run(GemmFn<T> fn, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
         const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (!fn) throw std::logic_error("gemm: this process has no BLAS gemm");
  const int M = int(m), N = int(n), K = int(k), LDA = int(lda), LDB = int(ldb), LDC = int(ldc);
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  // column-major: Cᵀ (n×m) = op(B)ᵀ (n×k) · op(A)ᵀ (k×m)
  fn(&tb, &ta, &N, &M, &K, &alpha, b, &LDB, a, &LDA, &beta, c, &LDC);
}

}  // namespace

bool blas_available() { return blas().sgemm != nullptr && blas().dgemm != nullptr; }

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  run(m * n * k <= small_sgemm_limit() ? blas().sgemm_small : blas().sgemm, trans_a, trans_b, m, n, k, alpha, a, lda, b,
      ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  run(blas().dgemm, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace wg
