// The process-wide floor on thread stack sizes that lets civetweb (inside
// prometheus-cpp's Exposer) start its threads in a process that loads
// LibTorch; see src/telemetry/thread_stack.cpp for why it exists.
#pragma once

#include <cstddef>

namespace wg::telemetry {

// Requests for a smaller thread stack are raised to this.
inline constexpr std::size_t kThreadStackFloor = std::size_t(1) << 20;

// True when the process's pthread_attr_setstacksize is the floor below, i.e.
// the executable exports it so that libcivetweb.so binds to it. False means
// civetweb gets the 100 KiB stacks it asks for.
bool thread_stack_floor_active();

}  // namespace wg::telemetry
