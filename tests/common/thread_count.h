// LibTorch's intra-op thread count for the tests that check a kernel gives
// the same bits on any number of threads: set for a scope, and put back when
// the scope ends, also when an assertion or the kernel throws.
#pragma once

#include <ATen/Parallel.h>

#include <initializer_list>
#include <type_traits>
#include <vector>

namespace wg::testing {

class ThreadCount {
 public:
  explicit ThreadCount(int n) : before_(at::get_num_threads()) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(before_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int before_;
};

// fn() run on each thread count in turn: its results in that order.
template <class Fn>
auto on_each_thread_count(std::initializer_list<int> counts, Fn fn) -> std::vector<std::invoke_result_t<Fn>> {
  std::vector<std::invoke_result_t<Fn>> results;
  for (const int n : counts) {
    const ThreadCount scoped(n);
    results.push_back(fn());
  }
  return results;
}

}  // namespace wg::testing
