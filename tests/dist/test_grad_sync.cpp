// GradSync under mpirun -np 2, where one rank's backward fails part-way:
// the buckets it already handed to its communication thread are in flight,
// or waiting in a collective for the other rank. Unwinding destroys its
// GradSync, and that must come back (main then ends the job with
// MPI_Abort, wgtrain's main.cpp), while the other rank's exchange goes on.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <thread>

#include "dist_test_context.h"
#include "wg/dist/communicator.h"
#include "wg/dist/context.h"
#include "wg/dist/grad_sync.h"

namespace wg {
namespace {

// The real MPI communicator, counting the allreduces this rank issued.
class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(std::unique_ptr<Communicator> c) : inner_(std::move(c)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  void allreduce_sum(float* data, size_t count) override {
    ++entered;
    inner_->allreduce_sum(data, count);
    ++allreduces;
  }
  void broadcast(float* data, size_t count, int root) override { inner_->broadcast(data, count, root); }
  std::atomic<int> entered{0};     // allreduces begun
  std::atomic<int> allreduces{0};  // and finished

 private:
  std::unique_ptr<Communicator> inner_;
};

// The identity, whose backward throws where `fail` is set (a backward that
// fails, as a kernel or a recomputation can, with an error other than out
// of memory, which the trainer retries).
struct FailingBackward : torch::autograd::Function<FailingBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, bool fail) {
    ctx->saved_data["fail"] = fail;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    if (ctx->saved_data["fail"].toBool()) throw std::runtime_error("this backward fails on purpose");
    return {g[0], torch::Tensor()};
  }
};

TEST(GradSync, ARankWhoseBackwardFailsMidExchangeLetsItGo) {
  const DistContext& dist = test_dist();
  ASSERT_EQ(dist.size(), 2) << "run under mpirun -np 2";
  if (!dist.threads_multiple()) GTEST_SKIP() << "MPI without MPI_THREAD_MULTIPLE: no communication thread";
  constexpr int kParams = 6;
  constexpr int64_t kSize = 256;
  std::vector<torch::Tensor> params;
  for (int i = 0; i < kParams; ++i) params.push_back(torch::full({kSize}, float(i + 1)).requires_grad_());
  CountingCommunicator comm(make_mpi_communicator(dist));
  const bool fails = dist.rank() == 1;
  auto sync = std::make_unique<GradSync>(params, comm, size_t(kSize) * 4, /*overlap=*/true);
  ASSERT_EQ(sync->num_buckets(), kParams);  // one parameter each, the last registered first

  // h = (((p0 · 1.5 + p1) · 1.5 + p2) · 1.5 + p3) ...: backward finishes p5,
  // p4 and p3 (buckets 0-2), then reaches the failing node, then p2, p1, p0.
  torch::Tensor h = params[0];
  for (int i = 1; i < kParams; ++i) {
    if (i == 3) h = FailingBackward::apply(h, fails);
    h = h * 1.5 + params[i];
  }
  sync->begin();
  // The other rank comes late, so that the failing rank's communication
  // thread is waiting inside a collective when its GradSync goes.
  if (!fails) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  bool threw = false;
  try {
    h.sum().backward();
  } catch (const std::exception&) {
    threw = true;
  }
  EXPECT_EQ(threw, fails);

  int launched = -1;  // the failing rank's buckets exchanged before its GradSync went
  bool let_go = true;
  if (fails) {
    // Bucket 0 (p5) was complete before the failure; its collective has
    // begun, or is about to: wait until the thread is in it.
    for (int ms = 0; comm.entered == 0 && ms < 30000; ++ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto gone = std::async(std::launch::async, [&] { sync.reset(); });
    if (gone.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      std::fprintf(stderr, "GradSync: the failed rank's GradSync did not come back in 60 s\n");
      MPI_Abort(MPI_COMM_WORLD, 1);  // its thread is stuck in a collective: nothing else ends the test
    }
    launched = comm.allreduces;
    // What the rank would no longer send: the rest of the other rank's
    // exchange (each bucket: its gradient, then one flag).
    std::vector<float> zeros(size_t(kSize) + 1, 0.0f);
    for (int k = launched; k < kParams; ++k) comm.allreduce_sum(zeros.data(), zeros.size());
  } else {
    sync->finish();
    for (const torch::Tensor& p : params) let_go = let_go && p.grad().defined();
  }
  // Rank 0 asserts what rank 1 saw (only rank 0 prints).
  int from_failing = launched;
  MPI_Bcast(&from_failing, 1, MPI_INT, 1, MPI_COMM_WORLD);
  EXPECT_GE(from_failing, 1) << "no bucket was in the exchange when backward failed: the case is not tested";
  EXPECT_LE(from_failing, 3);
  EXPECT_TRUE(let_go);
}

// Its hooks on the parameters' gradient accumulators call into it: they go
// with it, also from accumulators a graph made before keeps alive, and that
// graph's backward then makes plain gradients.
TEST(GradSync, TakesItsHooksAwayWhenItGoes) {
  const torch::Tensor p = torch::ones({8}).requires_grad_();
  const torch::Tensor y = (p * 2).sum();  // holds p's accumulator
  const auto acc = torch::autograd::impl::grad_accumulator(p);
  const size_t before = acc->post_hooks().size();
  {
    const auto comm = make_mpi_communicator(test_dist());
    GradSync sync({p}, *comm, 1 << 20, /*overlap=*/true);
    EXPECT_EQ(acc->post_hooks().size(), before + 1);
  }
  ASSERT_EQ(acc->post_hooks().size(), before);  // else the backward below calls into freed memory
  y.backward();
  EXPECT_TRUE(torch::equal(p.grad(), torch::full({8}, 2.0f)));
}

}  // namespace
}  // namespace wg
