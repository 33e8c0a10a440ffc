// CPU sets for the side-thread tests: the calling thread's, and every CPU of
// the OpenMP runtime's places (empty when OpenMP binds nothing). Tests named
// UnderOpenMpBinding.* need OMP_PROC_BIND at the process's start; ctest runs
// them so (tests/CMakeLists.txt), and they skip themselves without it.
#pragma once

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <set>
#include <vector>

namespace wg::test {

inline std::set<int> thread_cpus() {
  cpu_set_t s;
  CPU_ZERO(&s);
  std::set<int> cpus;
  if (pthread_getaffinity_np(pthread_self(), sizeof s, &s) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) cpus.insert(c);
  return cpus;
}

inline std::set<int> openmp_place_cpus() {
  std::set<int> cpus;
  if (omp_get_proc_bind() == omp_proc_bind_false) return cpus;
  for (int p = 0; p < omp_get_num_places(); ++p) {
    std::vector<int> ids(size_t(omp_get_place_num_procs(p)));
    omp_get_place_proc_ids(p, ids.data());
    cpus.insert(ids.begin(), ids.end());
  }
  return cpus;
}

// Why an UnderOpenMpBinding test cannot run here, or empty.
inline const char* no_openmp_binding_here() {
  if (omp_get_proc_bind() == omp_proc_bind_false)
    return "OpenMP binds nothing here (ctest's util.side_threads_under_openmp_binding sets OMP_PROC_BIND=true)";
  if (openmp_place_cpus().size() < 2) return "one OpenMP place: nothing to widen to";
  return nullptr;
}

}  // namespace wg::test
