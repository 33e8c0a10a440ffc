// Side threads off OpenMP's binding (see header). Only the calling thread's
// affinity changes; the compute team keeps its places.
#include "wg/util/side_thread.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <vector>

namespace wg {

namespace {
// Every CPU of every OpenMP place; empty when OpenMP binds nothing.
cpu_set_t openmp_place_cpus() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (omp_get_proc_bind() == omp_proc_bind_false) return cpus;
  for (int p = 0; p < omp_get_num_places(); ++p) {
    std::vector<int> ids(size_t(omp_get_place_num_procs(p)));
    omp_get_place_proc_ids(p, ids.data());
    for (int id : ids)
      if (id >= 0 && id < CPU_SETSIZE) CPU_SET(id, &cpus);
  }
  return cpus;
}

// The calling thread onto every CPU of OpenMP's places.
SideThreadCpus widen_to_places() {
  SideThreadCpus r;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if ((r.error = pthread_getaffinity_np(pthread_self(), sizeof mine, &mine)) != 0) return r;
  r.before = r.after = CPU_COUNT(&mine);
  cpu_set_t places = openmp_place_cpus();
  if (CPU_COUNT(&places) == 0 || CPU_EQUAL(&places, &mine)) return r;
  if ((r.error = pthread_setaffinity_np(pthread_self(), sizeof places, &places)) != 0) return r;
  r.after = CPU_COUNT(&places);
  return r;
}
}  // namespace

SideThreadCpus unbind_side_thread(const char* who) {
  const SideThreadCpus r = widen_to_places();
  if (r.error != 0)
    spdlog::warn("{}: could not widen its CPU affinity beyond OpenMP's binding ({}); it stays on {} CPU(s)", who,
                 std::strerror(r.error), r.before);
  else if (r.after != r.before)
    spdlog::debug("{}: on {} CPU(s) of OpenMP's places instead of the {} OpenMP bound it to", who, r.after, r.before);
  return r;
}

}  // namespace wg
