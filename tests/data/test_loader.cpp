// The batch loader: the batches equal the dataset's, in any request order;
// producer exceptions reach next(); production stays bounded and stops
// promptly; the wait is measured and prefetching hides a slow producer;
// workers leave OpenMP's binding of the first thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "../common/openmp_places.h"
#include "../common/tiny_config.h"
#include "wg/data/loader.h"

namespace wg {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void expect_same(const BuiltBatch& a, const BuiltBatch& b, int64_t step) {
  EXPECT_EQ(a.sample_ids, b.sample_ids) << "step " << step;
  EXPECT_EQ(a.windows, b.windows) << "step " << step;
  EXPECT_EQ(a.layout.idxs_embed, b.layout.idxs_embed) << "step " << step;
  ASSERT_EQ(a.samples.size(), b.samples.size()) << "step " << step;
  for (size_t i = 0; i < a.samples.size(); ++i)
    for (size_t s = 0; s < a.samples[i].size(); ++s) {
      const StreamSample &x = a.samples[i][s], &y = b.samples[i][s];
      EXPECT_EQ(x.stream, y.stream);
      EXPECT_EQ(x.source_tokens, y.source_tokens) << "step " << step << " stream " << x.stream;
      EXPECT_EQ(x.source_centroids, y.source_centroids) << "step " << step << " stream " << x.stream;
      ASSERT_EQ(x.targets.size(), y.targets.size());
      for (size_t f = 0; f < x.targets.size(); ++f) EXPECT_EQ(x.targets[f].coords, y.targets[f].coords);
    }
}

// Polls `done` until it holds or `limit` passes.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 5000ms) {
  const auto t0 = Clock::now();
  while (!done()) {
    if (Clock::now() - t0 > limit) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A batch that only carries its step, for producers in these tests.
BuiltBatch marked(int64_t step) {
  BuiltBatch b;
  b.sample_ids = {step};
  return b;
}

TEST(BatchLoader, SameBatchesAsTheDataset) {
  const Dataset dataset(testing::tiny_config(), 0, 1);
  for (int workers : {0, 1, 3}) {
    BatchLoader loader(dataset, workers, 2);
    EXPECT_EQ(loader.workers(), workers);
    for (int64_t k = 0; k < dataset.total_steps(); ++k) expect_same(loader.next(k), dataset.batch(k), k);
  }
}

TEST(BatchLoader, OutOfOrderRequestsRestartProduction) {
  const Dataset dataset(testing::tiny_config(), 0, 1);
  const int64_t last = dataset.total_steps() - 1;
  BatchLoader loader(dataset, 2, 2);
  for (int64_t k : {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(2), last, int64_t(0), int64_t(1),
                    last + 3, int64_t(2)})
    expect_same(loader.next(k), dataset.batch(k), k);
}

struct ChunkError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

TEST(BatchLoader, ProducerExceptionReachesNextForItsStep) {
  for (int workers : {0, 2}) {
    BatchLoader loader(
        [](int64_t step) {
          if (step == 3) throw ChunkError("unreadable chunk at step 3");
          return marked(step);
        },
        10, workers, 2);
    for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(loader.next(k).sample_ids.front(), k);
    try {
      loader.next(3);
      ADD_FAILURE() << "no exception for step 3 with " << workers << " workers";
    } catch (const ChunkError& e) {
      EXPECT_STREQ(e.what(), "unreadable chunk at step 3");
    }
    EXPECT_EQ(loader.next(4).sample_ids.front(), 4);
  }
}

TEST(BatchLoader, HoldsAtMostPrefetchPerWorkerAheadAndStopsPromptlyWhenFull) {
  std::atomic<int> produced{0};
  auto loader = std::make_unique<BatchLoader>(
      [&](int64_t step) {
        ++produced;
        return marked(step);
      },
      100, 2, 2);
  EXPECT_EQ(produced.load(), 0);  // nothing before the first request
  loader->next(0);
  ASSERT_TRUE(eventually([&] { return produced == 5; })) << produced.load();  // step 0 and 2 workers x 2 ahead
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(produced.load(), 5);
  const auto t0 = Clock::now();
  loader.reset();
  EXPECT_LT(seconds_since(t0), 0.5);
}

TEST(BatchLoader, StopsPromptlyWithWorkersMidProduction) {
  // Steps 2 and 3 take 1 s: the stop must come while they are in hand,
  // which leaves this thread 1 s to get from seeing them start to reset()
  // on a loaded machine (step 4 is claimable once they are done).
  constexpr auto kInHand = 1000ms;
  std::atomic<int> started{0};
  auto loader = std::make_unique<BatchLoader>(
      [&](int64_t step) {
        ++started;
        std::this_thread::sleep_for(step < 2 ? 100ms : kInHand);
        return marked(step);
      },
      100, 2, 2);
  loader->next(0);  // steps 0 and 1 produced together, then the workers go on with 2 and 3
  ASSERT_TRUE(eventually([&] { return started == 4; }));
  const auto t0 = Clock::now();
  loader.reset();
  // the batches in hand are finished, no new ones started
  EXPECT_LT(seconds_since(t0), std::chrono::duration<double>(kInHand).count() + 0.5);
  EXPECT_EQ(started.load(), 4);
}

TEST(BatchLoader, StepsBeyondTheRunAreNotProducedAhead) {
  std::mutex mutex;
  std::set<int64_t> steps;
  BatchLoader loader(
      [&](int64_t step) {
        std::lock_guard<std::mutex> lock(mutex);
        steps.insert(step);
        return marked(step);
      },
      3, 2, 2);
  for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(loader.next(k).sample_ids.front(), k);
  std::this_thread::sleep_for(50ms);
  {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_EQ(steps, (std::set<int64_t>{0, 1, 2}));
  }
  EXPECT_EQ(loader.next(5).sample_ids.front(), 5);  // produced on request
}

// A producer that takes 50 ms per batch and a step that computes for 150 ms:
// without workers every step waits the 50 ms; with them only the first does.
TEST(BatchLoader, WaitIsMeasuredAndPrefetchingHidesIt) {
  const auto slow = [](int64_t step) {
    std::this_thread::sleep_for(50ms);
    return marked(step);
  };
  BatchLoader inline_loader(slow, 10, 0, 1);
  for (int64_t k = 0; k < 3; ++k) {
    inline_loader.next(k);
    EXPECT_GE(inline_loader.last_wait_seconds(), 0.045) << "step " << k;
  }
  BatchLoader loader(slow, 10, 1, 1);
  loader.next(0);
  EXPECT_GE(loader.last_wait_seconds(), 0.045);
  for (int64_t k = 1; k < 5; ++k) {
    std::this_thread::sleep_for(150ms);  // the step's compute
    loader.next(k);
    // under one production (50 ms), with room for a wake-up a loaded machine delays
    EXPECT_LT(loader.last_wait_seconds(), 0.045) << "step " << k;
  }
}

TEST(BatchLoader, RejectsBadSettings) {
  const auto produce = [](int64_t step) { return marked(step); };
  EXPECT_THROW(BatchLoader(produce, 10, -1, 2), std::invalid_argument);
  EXPECT_THROW(BatchLoader(produce, 10, 2, 0), std::invalid_argument);
}

// Under OMP_PROC_BIND every worker would inherit the training thread's one
// CPU (side_thread.h); they run on every CPU of OpenMP's places instead.
TEST(UnderOpenMpBinding, LoaderWorkersRunOnEveryPlace) {
  if (const char* why = test::no_openmp_binding_here()) GTEST_SKIP() << why;
  std::mutex mu;
  std::vector<std::set<int>> seen;
  BatchLoader loader(
      [&](int64_t) {
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(test::thread_cpus());
        return BuiltBatch{};
      },
      6, 2, 1);
  for (int64_t step = 0; step < 6; ++step) loader.next(step);
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& cpus : seen) EXPECT_EQ(cpus, test::openmp_place_cpus());
  EXPECT_LT(test::thread_cpus().size(), test::openmp_place_cpus().size()) << "the training thread keeps its binding";
}

}  // namespace
}  // namespace wg
