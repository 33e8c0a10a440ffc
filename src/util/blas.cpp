// Batched small products through BLAS (see header).
//
// BLAS is column-major: a row-major C = op(A) · op(B) is the column-major
// Cᵀ = op(B)ᵀ · op(A)ᵀ, so the operands are passed swapped, each with its
// row-major leading dimension. The functions are looked up once (the
// statics below are written once, on first use, and only read after).
#include "wg/util/blas.h"

#include <dlfcn.h>

#include <stdexcept>

namespace wg {
namespace {

template <typename T>
using GemmFn = void (*)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                        const T* alpha, const T* a, const int* lda, const T* b, const int* ldb, const T* beta, T* c,
                        const int* ldc);

struct Blas {
  GemmFn<float> sgemm = nullptr;
  GemmFn<double> dgemm = nullptr;
};

const Blas& blas() {
  static const Blas found = [] {
    Blas b;
    b.sgemm = reinterpret_cast<GemmFn<float>>(dlsym(RTLD_DEFAULT, "sgemm_"));
    b.dgemm = reinterpret_cast<GemmFn<double>>(dlsym(RTLD_DEFAULT, "dgemm_"));
    return b;
  }();
  return found;
}

template <typename T>
void run(GemmFn<T> gemm, bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k, T alpha,
         const T* a, const T* b, T beta, T* c) {
  if (!gemm) throw std::logic_error("batched_gemm: this process has no BLAS gemm");
  const int M = int(m), N = int(n), K = int(k);
  const int lda = int(trans_a ? m : k), ldb = int(trans_b ? k : n), ldc = N;
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int64_t sa = m * k, sb = k * n, sc = m * n;
  for (int64_t i = 0; i < batch; ++i)  // column-major: Cᵀ (n×m) = op(B)ᵀ (n×k) · op(A)ᵀ (k×m)
    gemm(&tb, &ta, &N, &M, &K, &alpha, b + i * sb, &ldb, a + i * sa, &lda, &beta, c + i * sc, &ldc);
}

}  // namespace

bool blas_available() { return blas().sgemm != nullptr && blas().dgemm != nullptr; }

void batched_gemm(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const float* b, float beta, float* c) {
  run(blas().sgemm, trans_a, trans_b, batch, m, n, k, alpha, a, b, beta, c);
}

void batched_gemm(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k, double alpha,
                  const double* a, const double* b, double beta, double* c) {
  run(blas().dgemm, trans_a, trans_b, batch, m, n, k, alpha, a, b, beta, c);
}

}  // namespace wg
