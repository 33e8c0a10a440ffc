// Background batch production (see header). Workers claim steps in order
// under one mutex; a step is claimable while it is below total_steps and
// fewer than workers * prefetch steps after the one next() waits for. A
// restart bumps the generation, so a worker still busy with a discarded step
// drops its result.
#include "wg/data/loader.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "wg/util/side_thread.h"

namespace wg {

namespace {
// SCHED_BATCH: a worker that next() wakes does not preempt the training
// thread. Otherwise, with LibTorch busy on every core, Linux runs the woken
// worker at once and the training thread sits out its whole batch inside
// next(), measured as a wait for data that was ready (about half the steps of
// cpu_small on 2 cores; 1 in 10 with this). Best effort: a failure changes
// nothing else.
void yield_to_running_threads() {
  sched_param param{};
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
}
}  // namespace

BatchLoader::BatchLoader(const Dataset& dataset, int workers, int prefetch)
    : BatchLoader([&dataset](int64_t step) { return dataset.batch(step); }, dataset.total_steps(), workers,
                  prefetch) {}

BatchLoader::BatchLoader(Producer produce, int64_t total_steps, int workers, int prefetch)
    : produce_(std::move(produce)), total_steps_(total_steps), capacity_(int64_t(workers) * prefetch) {
  if (workers < 0) throw std::invalid_argument("loader_num_workers must be >= 0, got " + std::to_string(workers));
  if (prefetch < 1) throw std::invalid_argument("loader_prefetch must be >= 1, got " + std::to_string(prefetch));
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

BuiltBatch BatchLoader::next(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  BuiltBatch batch = threads_.empty() || step < 0 || step >= total_steps_ ? produce_(step) : take(step);
  last_wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return batch;
}

BuiltBatch BatchLoader::take(int64_t step) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (step != expected_) restart(step);
  ready_cv_.wait(lock, [&] {
    const auto it = slots_.find(step);
    return it != slots_.end() && it->second.done;
  });
  Slot slot = std::move(slots_.extract(step).mapped());
  expected_ = step + 1;  // one more step becomes claimable
  lock.unlock();
  work_cv_.notify_one();
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

void BatchLoader::restart(int64_t step) {
  slots_.clear();
  ++generation_;
  expected_ = next_claim_ = step;
  work_cv_.notify_all();
}

bool BatchLoader::claimable() const {
  return expected_ >= 0 && next_claim_ < total_steps_ && next_claim_ < expected_ + capacity_;
}

void BatchLoader::work() {
  yield_to_running_threads();
  // Off the CPU OpenMP bound the process's first thread to (side_thread.h):
  // otherwise every worker would share the training thread's core.
  unbind_side_thread("data loader worker");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stop_ || claimable(); });
    if (stop_) return;
    const int64_t step = next_claim_++;
    const uint64_t generation = generation_;
    slots_[step];  // claimed: counts against the bound until next() takes it
    lock.unlock();
    Slot slot = produce(step);
    lock.lock();
    if (generation != generation_) continue;  // restarted meanwhile: dropped
    slots_[step] = std::move(slot);
    ready_cv_.notify_one();
  }
}

BatchLoader::Slot BatchLoader::produce(int64_t step) const {
  Slot slot;
  try {
    slot.batch = produce_(step);
  } catch (...) {
    slot.error = std::current_exception();
  }
  slot.done = true;
  return slot;
}

}  // namespace wg
