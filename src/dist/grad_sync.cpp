// Bucketed, overlapped gradient averaging (see header).
#include "wg/dist/grad_sync.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>

#include "wg/util/side_thread.h"

namespace wg {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs after a parameter's AccumulateGrad: its .grad is final for this
// backward. (Tensor hooks would also fire inside autograd::grad during a
// recomputation; accumulator post-hooks do not.)
struct AccumulatedHook : torch::autograd::FunctionPostHook {
  explicit AccumulatedHook(std::function<void()> f) : fn(std::move(f)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn();
    return outputs;
  }
  std::function<void()> fn;
};
}  // namespace

GradSync::GradSync(std::vector<torch::Tensor> params, Communicator& comm, size_t bucket_bytes, bool overlap)
    : params_(std::move(params)), comm_(comm), overlap_(overlap && comm.size() > 1) {
  where_.resize(params_.size());
  Bucket current;
  size_t bytes = 0;
  auto close = [&] {
    if (current.params.empty()) return;
    const auto opts = params_[current.params.front()].options().dtype(torch::kFloat32);
    current.flags = current.offsets.back() + params_[current.params.back()].numel();
    current.buffer = torch::zeros({current.flags + int64_t(current.params.size())}, opts);
    buckets_.push_back(std::move(current));
    current = Bucket{};
    bytes = 0;
  };
  for (size_t k = params_.size(); k-- > 0;) {
    TORCH_CHECK(params_[k].scalar_type() == torch::kFloat32, "GradSync: parameters must be float32");
    const size_t b = size_t(params_[k].numel()) * 4;
    if (!current.params.empty() && bytes + b > bucket_bytes) close();
    const int64_t offset = current.params.empty() ? 0 : current.offsets.back() + params_[current.params.back()].numel();
    where_[k] = {buckets_.size(), current.params.size()};
    current.params.push_back(k);
    current.offsets.push_back(offset);
    bytes += b;
  }
  close();
  for (size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
    hooks_.push_back(acc->add_post_hook(std::make_unique<AccumulatedHook>([this, k] { on_gradient(k); })));
    accumulators_.push_back(std::move(acc));
  }
  if (overlap_) thread_ = std::thread([this] { comm_loop(); });
}

GradSync::~GradSync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // A graph made before this goes keeps the accumulators: its backward must
  // not call into this.
  for (size_t k = 0; k < accumulators_.size(); ++k) accumulators_[k]->del_post_hook(hooks_[k]);
}

void GradSync::broadcast_parameters(int root) {
  torch::NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    for (size_t i = 0; i < b.params.size(); ++i)
      b.buffer.narrow(0, b.offsets[i], params_[b.params[i]].numel()).copy_(params_[b.params[i]].reshape(-1));
    comm_.broadcast(b.buffer.data_ptr<float>(), size_t(b.buffer.numel()), root);
    for (size_t i = 0; i < b.params.size(); ++i)
      params_[b.params[i]].copy_(b.buffer.narrow(0, b.offsets[i], params_[b.params[i]].numel()).view_as(params_[b.params[i]]));
  }
}

void GradSync::begin() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Bucket& b : buckets_) {
    b.buffer.zero_();
    b.ready = 0;
    b.complete = false;
  }
  next_launch_ = 0;
  reduced_ = 0;
  active_ = true;
}

void GradSync::on_gradient(size_t k) {
  if (!active_) return;  // a backward outside begin()/finish(): not ours to reduce
  const auto [bi, slot] = where_[k];
  Bucket& b = buckets_[bi];
  const torch::Tensor& g = params_[k].grad();
  if (g.defined()) {
    b.buffer.narrow(0, b.offsets[slot], g.numel()).copy_(g.reshape(-1));
    b.buffer.narrow(0, b.flags + int64_t(slot), 1).fill_(1.0f);  // summed: the ranks that had a gradient
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (++b.ready == b.params.size()) mark_complete(bi);
}

void GradSync::mark_complete(size_t bi) {
  buckets_[bi].complete = true;
  cv_.notify_all();
}

void GradSync::reduce(Bucket& b) {
  const auto t0 = Clock::now();
  comm_.allreduce_sum(b.buffer.data_ptr<float>(), size_t(b.buffer.numel()));
  stats_.comm_seconds += since(t0);
  ++stats_.buckets;
}

void GradSync::comm_loop() {
  // Off the CPU OpenMP bound the process's first thread to (side_thread.h),
  // which runs backward.
  unbind_side_thread("gradient sync thread");
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (active_ && next_launch_ < buckets_.size() && buckets_[next_launch_].complete); });
    if (stop_) return;
    Bucket& b = buckets_[next_launch_++];
    lock.unlock();
    try {
      reduce(b);
    } catch (...) {
      lock.lock();
      comm_error_ = std::current_exception();
      ++reduced_;
      cv_.notify_all();
      continue;
    }
    lock.lock();
    ++reduced_;
    cv_.notify_all();
  }
}

void GradSync::finish() {
  const auto t0 = Clock::now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (size_t i = 0; i < buckets_.size(); ++i)
      if (!buckets_[i].complete) mark_complete(i);  // parameters without a gradient: zeros
    if (overlap_) {
      cv_.wait(lock, [&] { return reduced_ == buckets_.size(); });
    }
    active_ = false;
    if (comm_error_) {
      auto e = comm_error_;
      comm_error_ = nullptr;
      std::rethrow_exception(e);
    }
  }
  if (!overlap_ && comm_.size() > 1)
    for (Bucket& b : buckets_) reduce(b);
  stats_.exposed_seconds += since(t0);

  torch::NoGradGuard no_grad;
  const float scale = 1.0f / float(comm_.size());
  for (Bucket& b : buckets_) {
    const torch::Tensor had_gradient = b.buffer.narrow(0, b.flags, int64_t(b.params.size())).to(torch::kCPU);
    const float* ranks_with_gradient = had_gradient.data_ptr<float>();
    for (size_t i = 0; i < b.params.size(); ++i) {
      torch::Tensor& p = params_[b.params[i]];
      // No rank had a gradient (a parameter the loss does not reach): it
      // stays without one, so the optimizer skips it as it does on one rank.
      if (ranks_with_gradient[i] == 0.0f) continue;
      torch::Tensor avg = b.buffer.narrow(0, b.offsets[i], p.numel()).view_as(p) * scale;
      if (p.grad().defined()) p.mutable_grad().copy_(avg);
      else p.mutable_grad() = avg;
    }
  }
}

}  // namespace wg
