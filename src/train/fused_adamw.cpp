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
//   their version counters bumped, as an in-place operation's would be;
// - gradient_norm() sums in double over fixed blocks, added in block
//   order: the same for any thread count; step_clipped's factor scales each
//   gradient element as it is read (the gradients themselves stay as they
//   were), which is what torch's clipping in place and then the step give.
#include "wg/train/fused_adamw.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "wg/util/optimizer_state_key.h"
#include "wg/util/vector_isa.h"

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
  float grad_scale, decay, b1, c1, b2, c2, sqrt_bc2, eps, neg_step;
};

// Elements [begin, end) of one parameter; branch-free so that it vectorises
// (the file is compiled without errno for sqrt, and without FMA contraction
// so that vector and scalar iterations round alike), compiled three times, for
// AVX-512, AVX2 with FMA and the baseline, the best the CPU has chosen
// (wg/util/vector_isa.h).
inline __attribute__((always_inline)) void update_range(const Update& u, int64_t begin, int64_t end) {
  float* __restrict p = u.p;
  const float* __restrict g = u.g;
  float* __restrict m = u.m;
  float* __restrict v = u.v;
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * u.grad_scale;  // (exact when 1)
    const float mi = u.b1 * m[i] + u.c1 * gi;
    const float vi = u.b2 * v[i] + u.c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / u.sqrt_bc2 + u.eps;
    p[i] = p[i] * u.decay + u.neg_step * (mi / denom);
  }
}

// Σ g² over n elements in double, in a fixed order (eight running sums,
// then their sum), so the result does not depend on the threads.
inline __attribute__((always_inline)) double sum_squares(const float* __restrict g, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += double(g[i + j]) * double(g[i + j]);
  for (; i < n; ++i) acc[i % 8] += double(g[i]) * double(g[i]);
  double sum = 0;
  for (double a : acc) sum += a;
  return sum;
}

using RangeFn = void (*)(const Update&, int64_t, int64_t);
using SquaresFn = double (*)(const float*, int64_t);
__attribute__((target("avx512f"))) void range_avx512(const Update& u, int64_t b, int64_t e) { update_range(u, b, e); }
__attribute__((target("avx2,fma"))) void range_avx2(const Update& u, int64_t b, int64_t e) { update_range(u, b, e); }
void range_base(const Update& u, int64_t b, int64_t e) { update_range(u, b, e); }
__attribute__((target("avx512f"))) double squares_avx512(const float* g, int64_t n) { return sum_squares(g, n); }
__attribute__((target("avx2,fma"))) double squares_avx2(const float* g, int64_t n) { return sum_squares(g, n); }
double squares_base(const float* g, int64_t n) { return sum_squares(g, n); }

RangeFn range_fn() { return by_vector_isa(range_avx512, range_avx2, range_base); }
SquaresFn squares_fn() { return by_vector_isa(squares_avx512, squares_avx2, squares_base); }

constexpr int64_t kNormBlock = 8192;  // elements of one partial sum of the gradient norm

bool cpu_float(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous() && !t.is_sparse();
}

bool fusable(const torch::Tensor& p, const torch::Tensor& g, const torch::optim::AdamWParamState& s) {
  for (const torch::Tensor* t : {&p, &g, &s.exp_avg(), &s.exp_avg_sq()})
    if (!cpu_float(*t)) return false;
  return g.numel() == p.numel() && s.exp_avg().numel() == p.numel() && s.exp_avg_sq().numel() == p.numel();
}

// torch::optim::AdamW's own operations, for what the loop does not take.
void torch_update(torch::Tensor& p, const torch::Tensor& g_in, double grad_scale, torch::optim::AdamWParamState& s,
                  const torch::optim::AdamWOptions& o, double bc1, double bc2) {
  const torch::Tensor g = grad_scale == 1 ? g_in : g_in * grad_scale;
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
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  step_scaled(1.0);
  return loss;
}

void FusedAdamW::clear_gradients() {
  for (auto& group : param_groups())
    for (auto& p : group.params()) p.mutable_grad() = torch::Tensor();
}

void FusedAdamW::unscale_gradients(double scale) {
  torch::NoGradGuard no_grad;
  const double inverse = double(float(1.0 / scale));  // torch: the scale's double reciprocal, as float32
  for (const auto& p : params_with_grad()) p.grad().mul_(inverse);
}

std::vector<torch::Tensor> FusedAdamW::params_with_grad() {
  std::vector<torch::Tensor> out;
  for (auto& group : param_groups())
    for (auto& p : group.params())
      if (p.grad().defined()) out.push_back(p);
  return out;
}

double FusedAdamW::gradient_norm() {
  const std::vector<torch::Tensor> ps = params_with_grad();
  std::vector<torch::Tensor> gs;
  for (const auto& p : ps) gs.push_back(p.grad());
  if (gs.empty()) return 0.0;
  if (!std::all_of(gs.begin(), gs.end(), cpu_float)) {  // as torch::nn::utils::clip_grad_norm_ computes it
    std::vector<torch::Tensor> norms;
    for (const auto& g : gs) norms.push_back(g.norm(2));
    return (norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2)).item<double>();
  }
  // Partial sums over blocks of kNormBlock elements, in parallel, then
  // added in block order.
  std::vector<std::pair<size_t, int64_t>> blocks;  // (gradient, first element)
  for (size_t k = 0; k < gs.size(); ++k)
    for (int64_t at = 0; at < gs[k].numel(); at += kNormBlock) blocks.emplace_back(k, at);
  std::vector<double> partial(blocks.size());
  const SquaresFn fn = squares_fn();
  at::parallel_for(0, int64_t(blocks.size()), std::max<int64_t>(1, kGrain / kNormBlock), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const auto [k, first] = blocks[size_t(b)];
      partial[size_t(b)] = fn(gs[k].data_ptr<float>() + first, std::min(kNormBlock, gs[k].numel() - first));
    }
  });
  double sum = 0;
  for (const double x : partial) sum += x;
  return std::sqrt(sum);
}

void FusedAdamW::step_clipped(double norm, double max_norm) {
  const std::vector<torch::Tensor> ps = params_with_grad();
  if (ps.empty()) return;
  if (!std::all_of(ps.begin(), ps.end(), [](const torch::Tensor& p) { return cpu_float(p.grad()); })) {
    // torch's clipping in place, its factor computed in the norm's dtype as
    // clip_grad_norm_ does (the norm came from that dtype: exact), then the step
    torch::NoGradGuard no_grad;
    c10::ScalarType dtype = ps[0].grad().scalar_type();  // the stacked norms' type
    for (const auto& p : ps) dtype = c10::promoteTypes(dtype, p.grad().scalar_type());
    const torch::Tensor total = torch::full({}, norm, ps[0].grad().options().dtype(dtype));
    const torch::Tensor coef = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
    for (const auto& p : ps) p.grad().mul_(coef);
    step_scaled(1.0);
    return;
  }
  const double coef = max_norm / (norm + 1e-6);  // as torch: applied when below 1
  step_scaled(coef < 1 ? coef : 1.0);
}

double FusedAdamW::clip_and_step(double max_norm) {
  const double norm = gradient_norm();
  if (std::isfinite(norm)) step_clipped(norm, max_norm);
  return norm;
}

void FusedAdamW::step_scaled(double grad_scale) {
  torch::NoGradGuard no_grad;
  std::vector<Update> fused;
  std::vector<int64_t> starts{0};  // fused[k] covers elements [starts[k], starts[k + 1]) of the loop
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) throw std::invalid_argument("FusedAdamW: amsgrad is not supported");
    const auto [b1, b2] = o.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& g = p.grad();
      const auto key = optimizer_state_key(p);
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
        torch_update(p, g, grad_scale, s, o, bc1, bc2);
        continue;
      }
      for (const torch::Tensor* t : {&p, &s.exp_avg(), &s.exp_avg_sq()})  // written below, as in-place ops would
        t->unsafeGetTensorImpl()->bump_version();
      fused.push_back(Update{p.data_ptr<float>(), g.data_ptr<float>(), s.exp_avg().data_ptr<float>(),
                             s.exp_avg_sq().data_ptr<float>(), p.numel(), float(grad_scale),
                             float(1 - o.lr() * o.weight_decay()),
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
}

}  // namespace wg
