// Data-parallel gradient averaging in size-bounded buckets, overlapped with
// backward.
//
// Parameters are grouped, in reverse registration order (roughly the order
// backward produces their gradients), into buckets of at most bucket_bytes.
// A post-hook on each parameter's gradient accumulator copies its finished
// gradient into the bucket's flat buffer; when a bucket is complete, a
// communication thread allreduces it while backward goes on. Buckets are
// always launched in bucket order, on every rank, so ranks whose gradients
// become ready in a different order (different checkpoint plans) still issue
// the same collectives. finish() marks buckets whose parameters got no
// gradient this step as complete (zeros), waits, and writes the averages
// back into the .grad of every parameter that had a gradient on some rank
// (each bucket carries one flag per parameter, summed with it); a parameter
// no rank had a gradient for keeps none, so AdamW skips it as on one rank. Gradients from recomputed pieces arrive
// through the same accumulators, so checkpointing changes only the timing.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "wg/dist/communicator.h"

namespace wg {

struct GradSyncStats {
  double comm_seconds = 0;     // time in allreduce calls (communication thread)
  double exposed_seconds = 0;  // time finish() waited after backward ended
  int64_t buckets = 0;         // launched
};

class GradSync {
 public:
  // overlap=false: every bucket is reduced inside finish(), on the caller's
  // thread (when MPI was not granted multi-threading).
  GradSync(std::vector<torch::Tensor> params, Communicator& comm, size_t bucket_bytes, bool overlap);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Rank `root`'s parameter values on every rank.
  void broadcast_parameters(int root = 0);
  // Call before backward; clears readiness.
  void begin();
  // Call after backward; returns when every .grad holds the rank average.
  void finish();

  int num_buckets() const { return int(buckets_.size()); }
  const GradSyncStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offsets; // element offset of each param in the buffer
    torch::Tensor buffer;         // flat float32, on the params' device: the gradients, then one flag per param
    int64_t flags = 0;            // offset of the flags (1 where the rank had a gradient; summed by the allreduce)
    size_t ready = 0;
    bool complete = false;
  };
  void on_gradient(size_t param);    // from the autograd hook
  void mark_complete(size_t bucket);  // caller holds mu_
  void reduce(Bucket& b);
  void comm_loop();

  std::vector<torch::Tensor> params_;
  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, slot)
  std::vector<Bucket> buckets_;
  // The parameters' gradient accumulators, kept alive for the hooks: as
  // grad_accumulator gives them (a shared_ptr up to LibTorch 2.11; later
  // releases make Node intrusive).
  using AccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));
  std::vector<AccumulatorPtr> accumulators_;
  std::vector<uintptr_t> hooks_;  // each accumulator's hook, taken away in the destructor (it calls into this)
  Communicator& comm_;
  bool overlap_;
  GradSyncStats stats_;

  std::mutex mu_;
  std::condition_variable cv_;
  size_t next_launch_ = 0;  // next bucket the communication thread reduces
  size_t reduced_ = 0;      // buckets done this step
  bool active_ = false;     // between begin() and finish()
  bool stop_ = false;
  std::exception_ptr comm_error_;
  std::thread thread_;
};

}  // namespace wg
