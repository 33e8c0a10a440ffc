// Compute threads of a process: LibTorch's intra-op pool gets `n` threads
// and the BLAS library one, since BLAS threads nested inside LibTorch's
// parallel regions oversubscribe the cores (measured on 2 cores with
// OpenBLAS-pthread: 3x slower steps, a third of the time in the kernel).
#pragma once

namespace wg {

// Returns the number of intra-op threads set.
int set_compute_threads(int n);

}  // namespace wg
