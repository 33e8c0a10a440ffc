// Thread set-up (see header). OpenBLAS is reached through dlsym so the
// binary does not link against one BLAS in particular.
#include "wg/util/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>

namespace wg {
namespace {

std::atomic<int> g_blas_threads{1};

// openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP; -1: not OpenBLAS.
int openblas_parallel() {
  using GetParallel = int (*)();
  auto get = reinterpret_cast<GetParallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  return get ? get() : -1;
}

}  // namespace

int set_compute_threads(int n) {
  n = std::max(1, n);
  using SetThreads = void (*)(int);
  auto set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  const int blas = openblas_parallel() == 2 ? n : 1;
  // OpenMP OpenBLAS's openblas_set_num_threads also sets OpenMP's count:
  // call it first, then LibTorch's, which then holds.
  if (set_blas) set_blas(blas);
  at::set_num_threads(n);
  g_blas_threads = set_blas ? blas : 1;
  return n;
}

int blas_threads() { return g_blas_threads.load(); }

const char* blas_kind() {
  switch (openblas_parallel()) {
    case 0: return "openblas-serial";
    case 1: return "openblas-pthread";
    case 2: return "openblas-openmp";
    default: return "other";
  }
}

}  // namespace wg
