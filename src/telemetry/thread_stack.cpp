// A floor on thread stack sizes, for civetweb's threads: one of this
// project's two documented process-wide interposers (see thread_stack.h;
// the other is src/util/onednn_sgemm.cpp).
//
// Debian's civetweb, which prometheus-cpp's Exposer runs (libprometheus-cpp-
// pull.so -> libcivetweb.so), starts every thread with a fixed 100 KiB stack
// (USE_STACK_SIZE). glibc places a thread's static TLS on its stack, and a
// process that loads LibTorch, OpenBLAS, glog and ~300 libraries has more
// static TLS than that, so pthread_create fails with EINVAL ("Cannot create
// threads") and the endpoint cannot start. civetweb has no option for the
// stack size, so this definition, linked into the executable and exported
// from it (wg_telemetry adds --export-dynamic-symbol), takes precedence over
// libc's for every library that calls it through its PLT and raises requests
// below kThreadStackFloor to the floor; larger requests pass unchanged.
#include "wg/telemetry/thread_stack.h"

#include <dlfcn.h>
#include <pthread.h>

#include <cerrno>

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Real = int (*)(pthread_attr_t*, size_t);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (!real) return EINVAL;
  return real(attr, size < wg::telemetry::kThreadStackFloor ? wg::telemetry::kThreadStackFloor : size);
}

namespace wg::telemetry {

bool thread_stack_floor_active() {
  // What the dynamic linker binds a library's call to: ours only if the
  // executable exports it.
  return dlsym(RTLD_DEFAULT, "pthread_attr_setstacksize") == reinterpret_cast<void*>(&pthread_attr_setstacksize);
}

}  // namespace wg::telemetry
