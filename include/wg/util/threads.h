// Compute threads of a process: LibTorch's intra-op pool gets `n` threads.
// BLAS gets `n` too when it is OpenBLAS's OpenMP build, which shares
// LibTorch's OpenMP pool (and runs single-threaded inside a parallel region
// of it); any other BLAS gets one thread, since a pthread OpenBLAS nested
// inside LibTorch's parallel regions oversubscribes the cores (measured on 2
// cores: 3x slower steps, a third of the time in the kernel).
#pragma once

namespace wg {

// Returns the number of intra-op threads set.
int set_compute_threads(int n);

// The BLAS threads set_compute_threads chose (1 unless OpenMP OpenBLAS), and
// which BLAS it found: "openblas-openmp", "openblas-pthread",
// "openblas-serial" or "other".
int blas_threads();
const char* blas_kind();

}  // namespace wg
