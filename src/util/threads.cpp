// Thread set-up (see header). OpenBLAS is reached through dlsym so the
// binary does not link against one BLAS in particular.
#include "wg/util/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>

namespace wg {

int set_compute_threads(int n) {
  n = std::max(1, n);
  at::set_num_threads(n);
  using SetThreads = void (*)(int);
  if (auto set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set_blas(1);
  return n;
}

}  // namespace wg
