// After a backward that threw (out of memory, mostly), LibTorch's autograd
// engine (seen with 1.13) leaves the failed graph's other ready tasks in
// the device's ready queue. They hold their nodes, and so the rest of the
// graph with every activation it saved, until the next backward on that
// queue pops them. A step retried after running out of memory in backward
// started with the failed attempt's graph still held (OomFallback's test:
// 17.1 MB in use at the retry's start instead of 10.7, against a limit of
// 17.6, so that every retry failed; tests/util/test_failed_backward.cpp).
#pragma once

#include <c10/core/Device.h>

namespace wg {

// Runs a one-element backward on `device`: the failed graph's tasks go
// first (a task whose graph is gone has the queue's highest priority), and
// are dropped, so the memory they held is free when this returns. Call it
// after the exception, once the failed step's loss is released.
void release_failed_backward(const c10::Device& device);

}  // namespace wg
