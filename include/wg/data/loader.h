// Batches prepared off the training thread: worker threads produce the
// batches of the upcoming steps, in step order, while the current step
// computes; the training thread takes them one by one and learns how long it
// waited. At most `prefetch` finished batches per worker are held ahead
// (bounded memory). Workers do no LibTorch work, so they do not compete with
// its intra-op threads beyond producing the data, and they run as batch
// threads that do not preempt the training thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "wg/data/sample_builder.h"
#include "wg/data/dataset.h"

namespace wg {

class BatchLoader {
 public:
  using Producer = std::function<BuiltBatch(int64_t step)>;

  // Serves `dataset.batch(step)`; the dataset must outlive the loader and its
  // batch() be thread-safe. `workers` 0: each batch is produced inside
  // next(), no threads. Throws std::invalid_argument for workers < 0 or
  // prefetch < 1.
  BatchLoader(const Dataset& dataset, int workers, int prefetch);
  // Serves `produce(step)`; steps from `total_steps` on are produced only on
  // request, never ahead. `produce` must be callable from several threads.
  BatchLoader(Producer produce, int64_t total_steps, int workers, int prefetch);
  ~BatchLoader();  // stops and joins the workers; one busy producing finishes that batch first
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The batch of `step`, blocking until it is ready. Production runs ahead
  // from the step after it. A step other than the one after the previous
  // call (the first call, a resume, a test) discards what was prepared and
  // restarts production from `step`. An exception the producer threw for
  // `step` is rethrown here, unchanged.
  BuiltBatch next(int64_t step);
  // Seconds the last next() blocked: waiting for a worker, or producing the
  // batch itself without workers.
  double last_wait_seconds() const { return last_wait_seconds_; }
  int workers() const { return int(threads_.size()); }

 private:
  struct Slot {  // a step claimed by a worker
    bool done = false;
    BuiltBatch batch;
    std::exception_ptr error;
  };

  BuiltBatch take(int64_t step);
  void restart(int64_t step);
  bool claimable() const;
  void work();
  Slot produce(int64_t step) const;

  Producer produce_;
  int64_t total_steps_;
  int64_t capacity_;  // steps claimed or finished at once: workers * prefetch

  std::mutex mutex_;
  std::condition_variable work_cv_;   // workers: a step became claimable, or stop
  std::condition_variable ready_cv_;  // next(): a slot became done
  std::map<int64_t, Slot> slots_;     // claimed and finished steps of this generation
  int64_t expected_ = -1;             // the step next() is asked for next; -1: not started
  int64_t next_claim_ = 0;            // the step the next free worker produces
  uint64_t generation_ = 0;           // bumped by restart(): older results are dropped
  bool stop_ = false;
  double last_wait_seconds_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace wg
