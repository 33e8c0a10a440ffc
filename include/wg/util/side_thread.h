// Threads beside the compute team: the data loader's workers and gradient
// sync's communication thread. With OMP_PROC_BIND (or OMP_PLACES) set,
// libgomp binds the process's first thread to the first OpenMP place as it
// loads, before main, and every thread started later inherits that CPU: the
// loader's workers would all share the core of the thread that runs the
// step (measured: bench_sample_builder's 2 loader threads built 40.7
// samples/s under OMP_PROC_BIND=true against 88.6 without).
//
// A side thread calls unbind_side_thread() first: under an OpenMP binding
// it may then run on every CPU of OpenMP's places (the CPUs the rank was
// given, or those OMP_PLACES names), and the kernel places it. Without a
// binding it changes nothing. A failed affinity call is logged as a
// warning naming `who` (the thread stays where it was), a widening at
// debug level.
#pragma once

namespace wg {

struct SideThreadCpus {
  int before = 0;  // CPUs the calling thread could run on
  int after = 0;   // and may run on now
  int error = 0;   // errno of an affinity call that failed (then after == before)
};

SideThreadCpus unbind_side_thread(const char* who);

}  // namespace wg
