// float32 matrix products through oneDNN (see header): one of this
// project's two documented process-wide interposers (the other is
// src/telemetry/thread_stack.cpp).
//
// Debian's LibTorch runs every float32 product on the CPU (mm, addmm, bmm,
// the products of their backward) through the Fortran BLAS symbol sgemm_,
// which libblas.so.3 gives: OpenBLAS 0.3.21. On this project's shapes
// (thousands of rows by 256 to 1536 columns) oneDNN's sgemm, Debian's
// libdnnl 2.6, runs up to a third faster on 2 AVX-512 cores, and needs no
// separate pass to clear C when beta is 0 (docs/benchmarks.md, "float32
// products through oneDNN": 8-18 % off a training step). The definition
// below, linked into every executable that links wg_util_torch and exported
// from it (CMakeLists.txt adds --undefined and --export-dynamic-symbol),
// takes precedence over libblas's for LibTorch and for dlsym(RTLD_DEFAULT),
// which wg::gemm uses. dgemm_ stays the BLAS's.
//
// oneDNN is row-major: the column-major C = op(A) · op(B) (m×n) is the
// row-major Cᵀ = op(B)ᵀ · op(A)ᵀ, so the operands go in swapped. Small
// products (m·n·k up to small_sgemm_limit(): the attention kernel's cells
// of a few points) go to the BLAS's own sgemm_ (dlsym RTLD_NEXT), whose
// small-matrix kernels take 0.05-0.15 us a call where oneDNN takes 0.3 and
// more (measured in docs/benchmarks.md). So do, without AVX-512, the
// weight gradients' long reductions, which OpenBLAS ran faster there
// (blas_takes_long_reduction), and what oneDNN does not do as BLAS does:
// an empty product (k = 0: BLAS scales C by beta; oneDNN
// leaves it), an empty C, alpha 0, transposes other than N and T, and
// arguments oneDNN rejects, which the BLAS then reports through xerbla as
// before. oneDNN uses the OpenMP threads of the calling thread (omp_get_max_threads, which
// set_compute_threads sets; one inside a parallel region, as the attention
// kernel's workers are) from the same libgomp pool as LibTorch's.
//
// A product's bits depend on the library and on the thread count as the
// library splits the work: oneDNN's from about 8 threads on for long
// reductions into a small C (it splits k over the threads; the same bits
// on 1 to 4 threads on the shapes measured), OpenBLAS's already between 1
// and 2 threads on some (docs/distributed.md: a resumed run repeats the
// uninterrupted one exactly with the same threads per rank).
#include "wg/util/onednn_sgemm.h"
#include "wg/util/vector_isa.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#ifdef WG_ONEDNN_SGEMM
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#endif

#ifdef WG_ONEDNN_SGEMM
namespace {

// The calls oneDNN runs as BLAS would: plain or transposed operands (not
// BLAS's 'C', nor oneDNN's own 'P', packed, which BLAS rejects), a
// non-empty product above the small ones, and alpha not 0 (with alpha 0
// and beta 0 oneDNN's copy path multiplies C by 0 and keeps its NaN; BLAS
// writes zeros).
bool onednn_takes(char transa, char transb, int m, int n, int k, float alpha) {
  const auto plain = [](char t) { return t == 'N' || t == 'n' || t == 'T' || t == 't'; };
  return plain(transa) && plain(transb) && m > 0 && n > 0 && k > 0 && alpha != 0.0f &&
         int64_t(m) * int64_t(n) * int64_t(k) > wg::small_sgemm_limit() &&
         !wg::blas_takes_long_reduction(transa, transb, m, n, k);
}

}  // namespace

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc) {
  if (onednn_takes(*transa, *transb, *m, *n, *k, *alpha)) {
    const dnnl_status_t s = dnnl_sgemm(*transb, *transa, *n, *m, *k, *alpha, b, *ldb, a, *lda, *beta, c, *ldc);
    if (s == dnnl_success) return;
    // Rejected before any work (its argument checks): the BLAS reports it.
    // Anything else (out of memory) may come after C was scaled by beta.
    if (s != dnnl_invalid_arguments && s != dnnl_unimplemented) {
      std::fprintf(stderr, "sgemm_: oneDNN failed on a %d x %d x %d product (%s); its output may be partly written\n",
                   *m, *n, *k, dnnl_status2str(s));
      std::abort();
    }
  }
  const wg::SgemmFn blas = wg::blas_own_sgemm();
  if (!blas) {
    std::fprintf(stderr, "sgemm_: a %d x %d x %d product is the BLAS's, and the process has no BLAS sgemm_\n", *m, *n,
                 *k);
    std::abort();
  }
  blas(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif

namespace wg {

int64_t small_sgemm_limit() { return vector_isa() == VectorIsa::Avx512 ? kSmallSgemmAvx512 : kSmallSgemmAvx2; }

bool blas_takes_long_reduction(char transa, char transb, int64_t m, int64_t n, int64_t k) {
  return vector_isa() != VectorIsa::Avx512 && (transa == 'N' || transa == 'n') && (transb == 'T' || transb == 't') &&
         k >= kLongReductionMin && k > m && k > n && m >= kLongReductionMinWidth && n >= kLongReductionMinWidth;
}

bool onednn_sgemm_built() {
#ifdef WG_ONEDNN_SGEMM
  return true;
#else
  return false;
#endif
}

bool onednn_sgemm_active() {
#ifdef WG_ONEDNN_SGEMM
  // What the dynamic linker binds a library's call to: ours only if the
  // executable exports it.
  return dlsym(RTLD_DEFAULT, "sgemm_") == reinterpret_cast<void*>(&sgemm_);
#else
  return false;
#endif
}

std::string sgemm_provider() {
#ifdef WG_ONEDNN_SGEMM
  if (onednn_sgemm_active()) {
    const dnnl_version_t* v = dnnl_version();
    return "onednn " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  }
#endif
  return "blas";
}

SgemmFn blas_own_sgemm() {
  // RTLD_NEXT from this file, which is linked into the executable: the
  // first library after it that defines sgemm_ (libblas.so.3).
  static const SgemmFn own =
      reinterpret_cast<SgemmFn>(dlsym(onednn_sgemm_active() ? RTLD_NEXT : RTLD_DEFAULT, "sgemm_"));
  return own;
}

}  // namespace wg
