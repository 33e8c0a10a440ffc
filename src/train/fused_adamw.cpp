// AdamW in one pass per element (see header).
//
// Invariants:
// - state lives where torch::optim::AdamW keeps it (state_, keyed by the
//   parameter's TensorImpl address, AdamWParamState), created on a
//   parameter's first update with zero moments, its step counted per
//   parameter, so saving, loading and the base class see the same state;
// - a parameter without a gradient is left alone and gets no state;
// - the fused loop covers the contiguous float32 CPU parameters of a step
//   in one parallel loop over all their elements, each element updated by
//   one thread from its own four values only; the tensors it writes have
//   their version counters bumped, as an in-place operation's would be.
#include "wg/train/fused_adamw.h"

#include <ATen/Parallel.h>
#include <c10/util/string_utils.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace wg {
namespace {

constexpr int64_t kGrain = 32768;  // elements per parallel task

// One parameter's share of a fused step.
struct Update {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  float decay, b1, c1, b2, c2, sqrt_bc2, eps, neg_step;
};

// Elements [begin, end) of one parameter; branch-free so that it vectorises
// (the file is compiled without errno for sqrt, and without FMA contraction
// so that vector and scalar iterations round alike), compiled three times, for
// AVX-512, AVX2 with FMA and the baseline, the best the CPU has chosen once.
inline __attribute__((always_inline)) void update_range(const Update& u, int64_t begin, int64_t end) {
  float* __restrict p = u.p;
  const float* __restrict g = u.g;
  float* __restrict m = u.m;
  float* __restrict v = u.v;
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    const float mi = u.b1 * m[i] + u.c1 * gi;
    const float vi = u.b2 * v[i] + u.c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / u.sqrt_bc2 + u.eps;
    p[i] = p[i] * u.decay + u.neg_step * (mi / denom);
  }
}

using RangeFn = void (*)(const Update&, int64_t, int64_t);
__attribute__((target("avx512f"))) void range_avx512(const Update& u, int64_t b, int64_t e) { update_range(u, b, e); }
__attribute__((target("avx2,fma"))) void range_avx2(const Update& u, int64_t b, int64_t e) { update_range(u, b, e); }
void range_base(const Update& u, int64_t b, int64_t e) { update_range(u, b, e); }

RangeFn range_fn() {
  static const RangeFn chosen = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return RangeFn(range_avx512);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return RangeFn(range_avx2);
    return RangeFn(range_base);
  }();
  return chosen;
}

bool fusable(const torch::Tensor& p, const torch::Tensor& g, const torch::optim::AdamWParamState& s) {
  for (const torch::Tensor* t : {&p, &g, &s.exp_avg(), &s.exp_avg_sq()})
    if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat || !t->is_contiguous() || t->is_sparse())
      return false;
  return g.numel() == p.numel() && s.exp_avg().numel() == p.numel() && s.exp_avg_sq().numel() == p.numel();
}

// torch::optim::AdamW's own operations, for what the loop does not take.
void torch_update(torch::Tensor& p, const torch::Tensor& g, torch::optim::AdamWParamState& s,
                  const torch::optim::AdamWOptions& o, double bc1, double bc2) {
  const auto [b1, b2] = o.betas();
  if (o.weight_decay() != 0) p.mul_(1 - o.lr() * o.weight_decay());
  s.exp_avg().mul_(b1).add_(g, 1 - b1);
  s.exp_avg_sq().mul_(b2).addcmul_(g, g, 1 - b2);
  const torch::Tensor denom = (s.exp_avg_sq().sqrt() / std::sqrt(bc2)).add_(o.eps());
  p.addcdiv_(s.exp_avg(), denom, -o.lr() / bc1);
}

}  // namespace

FusedAdamW::FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions options)
    : torch::optim::AdamW(std::move(params), std::move(options)) {
  if (static_cast<const torch::optim::AdamWOptions&>(defaults()).amsgrad())
    throw std::invalid_argument("FusedAdamW: amsgrad is not supported");
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  std::vector<Update> fused;
  std::vector<int64_t> starts{0};  // fused[k] covers elements [starts[k], starts[k + 1]) of the loop
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) throw std::invalid_argument("FusedAdamW: amsgrad is not supported");
    const auto [b1, b2] = o.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& g = p.grad();
      const std::string key = c10::guts::to_string(p.unsafeGetTensorImpl());
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(s)).first;
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      s.step(s.step() + 1);
      const double bc1 = 1 - std::pow(b1, double(s.step()));
      const double bc2 = 1 - std::pow(b2, double(s.step()));
      if (!fusable(p, g, s)) {
        torch_update(p, g, s, o, bc1, bc2);
        continue;
      }
      for (const torch::Tensor* t : {&p, &s.exp_avg(), &s.exp_avg_sq()})  // written below, as in-place ops would
        t->unsafeGetTensorImpl()->bump_version();
      fused.push_back(Update{p.data_ptr<float>(), g.data_ptr<float>(), s.exp_avg().data_ptr<float>(),
                             s.exp_avg_sq().data_ptr<float>(), p.numel(), float(1 - o.lr() * o.weight_decay()),
                             float(b1), float(1 - b1), float(b2), float(1 - b2), float(std::sqrt(bc2)),
                             float(o.eps()), float(-o.lr() / bc1)});
      starts.push_back(starts.back() + p.numel());
    }
  }
  const RangeFn fn = range_fn();
  at::parallel_for(0, starts.back(), kGrain, [&](int64_t begin, int64_t end) {
    // the first parameter this chunk touches, then on through the ones it spans
    size_t k = size_t(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
    for (int64_t at = begin; at < end; ++k) {
      const int64_t stop = std::min(end, starts[k + 1]);
      fn(fused[k], at - starts[k], stop - starts[k]);
      at = stop;
    }
  });
  return loss;
}

}  // namespace wg
