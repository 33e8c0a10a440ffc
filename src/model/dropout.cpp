// Dropout with a mask made from a seed (see header).
//
// Invariants:
// - element j's draw is a 32-bit half of output j / 2 of splitmix64
//   started at the seed (a counter hashed by two multiply-xorshift rounds:
//   the low half for even j, the high half for odd j); it is compared with
//   (1 - p) · 2^32, so a draw depends only on (seed, j);
// - out[j] = in[j] · (kept ? 1 / (1 - p) : 0), as torch's in · mask (a NaN
//   stays a NaN where dropped);
// - DropoutFunction keeps the seed and p, no tensor; its backward is the
//   same masked scaling of the incoming gradient;
// - DropoutKeeps holds a range's keep bytes (1 kept, 0 dropped) and
//   scales by the same factors, so a mask drawn once and applied to
//   several tensors gives the bits of drawing it for each.
#include "wg/model/dropout.h"
#include "dropout_draw.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <type_traits>

#include "wg/util/vector_isa.h"

namespace wg {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kGrain = 16384;  // elements per parallel task

// x[i] · mask for i in [0, n), element i taking draw `first + i` (its
// factor: dropout_draw.h): into out, or in place, a block of factors at a
// time. Written without aliasing (the in-place form has one pointer) so
// that the loops vectorise; compiled three times, for AVX-512 with
// AVX512DQ (which multiplies 64-bit lanes), for AVX2 and for the
// baseline, and the best the CPU supports is chosen (wg/util/vector_isa.h).
template <typename T>
inline __attribute__((always_inline)) void mask_range_impl(const T* in, T* out, int64_t n, int64_t first,
                                                            uint64_t seed, uint32_t threshold, T scale) {
  T factors[kDropoutBlock];
  for (int64_t b = 0; b < n; b += kDropoutBlock) {
    const int64_t m = std::min(kDropoutBlock, n - b);
    dropout_factors(seed, first + b, m, threshold, scale, factors);
    const T* __restrict f = factors;
    if (in == out) {
      T* o = out + b;
      for (int64_t i = 0; i < m; ++i) o[i] *= f[i];
    } else {
      const T* __restrict a = in + b;
      T* __restrict o = out + b;
      for (int64_t i = 0; i < m; ++i) o[i] = a[i] * f[i];
    }
  }
}

// The keep bytes of elements [first, first + n) (a DropoutKeeps), and x[i]
// · (keep[i] ? scale : 0) for i in [0, n): the factor as mask_range_impl's,
// so the same bits.
inline __attribute__((always_inline)) void keep_range_impl(uint8_t* keep, int64_t n, int64_t first, uint64_t seed,
                                                           uint32_t threshold) {
  for (int64_t b = 0; b < n; b += kDropoutBlock)
    dropout_keeps(seed, first + b, std::min(kDropoutBlock, n - b), threshold, keep + b);
}
template <typename T>
inline __attribute__((always_inline)) void keep_scale_impl(const T* in, T* out, const uint8_t* keep, int64_t n,
                                                           T scale) {
  if (in == out) {
    for (int64_t i = 0; i < n; ++i) out[i] *= keep[i] ? scale : T(0);
    return;
  }
  const T* __restrict a = in;
  T* __restrict o = out;
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] * (keep[i] ? scale : T(0));
}

template <typename T>
using MaskFn = void (*)(const T*, T*, int64_t, int64_t, uint64_t, uint32_t, T);
using KeepFn = void (*)(uint8_t*, int64_t, int64_t, uint64_t, uint32_t);
template <typename T>
using KeepScaleFn = void (*)(const T*, T*, const uint8_t*, int64_t, T);

// The three loops compiled for one instruction set: mask_range_<isa>,
// keep_range_<isa>, keep_scale_<isa>.
#define WG_DROPOUT_LOOPS(isa, attributes)                                                                            \
  template <typename T>                                                                                              \
  attributes void mask_range_##isa(const T* in, T* out, int64_t n, int64_t first, uint64_t seed, uint32_t threshold, \
                                   T scale) {                                                                        \
    mask_range_impl(in, out, n, first, seed, threshold, scale);                                                      \
  }                                                                                                                  \
  attributes void keep_range_##isa(uint8_t* keep, int64_t n, int64_t first, uint64_t seed, uint32_t threshold) {     \
    keep_range_impl(keep, n, first, seed, threshold);                                                                \
  }                                                                                                                  \
  template <typename T>                                                                                              \
  attributes void keep_scale_##isa(const T* in, T* out, const uint8_t* keep, int64_t n, T scale) {                   \
    keep_scale_impl(in, out, keep, n, scale);                                                                        \
  }
WG_DROPOUT_LOOPS(avx512, __attribute__((target("avx512f,avx512dq"))))
WG_DROPOUT_LOOPS(avx2, __attribute__((target("avx2"))))
WG_DROPOUT_LOOPS(base, )
#undef WG_DROPOUT_LOOPS

template <typename T>
MaskFn<T> mask_range() {
  return by_vector_isa(mask_range_avx512<T>, mask_range_avx2<T>, mask_range_base<T>);
}
KeepFn keep_range() { return by_vector_isa(keep_range_avx512, keep_range_avx2, keep_range_base); }
template <typename T>
KeepScaleFn<T> keep_scale() {
  return by_vector_isa(keep_scale_avx512<T>, keep_scale_avx2<T>, keep_scale_base<T>);
}

template <typename T>
void masked_scale(const T* in, T* out, int64_t n, uint64_t seed, double p, int64_t offset) {
  // p in (0, 1): the threshold is below 2^32 (kept when the draw is below it)
  const uint32_t threshold = dropout_threshold(p);
  const T scale = T(1) / T(1.0 - p);
  const MaskFn<T> fn = mask_range<T>();
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    fn(in + begin, out + begin, end - begin, offset + begin, seed, threshold, scale);
  });
}

bool runs_here(const torch::Tensor& t) {
  return t.device().is_cpu() && (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble);
}

// out = in · mask(seed, p); in and out contiguous, of one dtype and size (may be the same tensor).
void masked_scale(const torch::Tensor& in, torch::Tensor& out, uint64_t seed, double p, int64_t offset = 0) {
  TORCH_CHECK(in.is_contiguous() && out.is_contiguous() && in.numel() == out.numel() &&
                  in.scalar_type() == out.scalar_type() && runs_here(in),
              "dropout mask: contiguous float32/float64 CPU tensors of one size");
  if (in.scalar_type() == torch::kFloat)
    masked_scale(in.data_ptr<float>(), out.data_ptr<float>(), in.numel(), seed, p, offset);
  else
    masked_scale(in.data_ptr<double>(), out.data_ptr<double>(), in.numel(), seed, p, offset);
}

struct DropoutFunction : public torch::autograd::Function<DropoutFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double p, int64_t seed) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    return dropout_masked(x, uint64_t(seed), p);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const double p = ctx->saved_data["p"].toDouble();
    const uint64_t seed = uint64_t(ctx->saved_data["seed"].toInt());
    return {dropout_masked(grads[0], seed, p), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

uint64_t draw_dropout_seed() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
}

torch::Tensor dropout(const torch::Tensor& x, double p, bool training) {
  if (!training || p <= 0) return x;
  if (!runs_here(x)) return torch::dropout(x, p, training);
  TORCH_CHECK(p < 1, "dropout: p must be below 1, got ", p);
  const int64_t seed = int64_t(draw_dropout_seed());
  return DropoutFunction::apply(x, p, seed);
}

void apply_dropout_mask_(torch::Tensor& t, uint64_t seed, double p, int64_t offset) {
  masked_scale(t, t, seed, p, offset);
}

torch::Tensor dropout_masked(const torch::Tensor& t, uint64_t seed, double p, int64_t offset) {
  const torch::Tensor in = t.contiguous();
  torch::Tensor out = torch::empty_like(in);
  masked_scale(in, out, seed, p, offset);
  return out;
}

DropoutKeeps::DropoutKeeps(int64_t n, uint64_t seed, double p, int64_t offset)
    : keep_(new uint8_t[size_t(n)]), size_(n), p_(p) {  // not zero-filled: every byte is drawn below
  TORCH_CHECK(p > 0 && p < 1, "dropout mask: p must be in (0, 1), got ", p);
  const uint32_t threshold = dropout_threshold(p);
  const KeepFn fn = keep_range();
  uint8_t* keep = keep_.get();
  at::parallel_for(0, n, kGrain,
                   [&](int64_t begin, int64_t end) { fn(keep + begin, end - begin, offset + begin, seed, threshold); });
}

void DropoutKeeps::scale(const torch::Tensor& in, torch::Tensor& out) const {
  TORCH_CHECK(in.is_contiguous() && out.is_contiguous() && in.numel() == size() && out.numel() == size() &&
                  in.scalar_type() == out.scalar_type() && runs_here(in),
              "dropout mask: contiguous float32/float64 CPU tensors of the mask's ", size(), " elements");
  const uint8_t* keep = keep_.get();
  const auto run = [&](auto* a, auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    const T s = T(1) / T(1.0 - p_);
    const KeepScaleFn<T> fn = keep_scale<T>();
    at::parallel_for(0, size(), kGrain,
                     [&](int64_t begin, int64_t end) { fn(a + begin, o + begin, keep + begin, end - begin, s); });
  };
  if (in.scalar_type() == torch::kFloat)
    run(in.data_ptr<float>(), out.data_ptr<float>());
  else
    run(in.data_ptr<double>(), out.data_ptr<double>());
}

void DropoutKeeps::apply_(torch::Tensor& t) const { scale(t, t); }

torch::Tensor DropoutKeeps::applied(const torch::Tensor& t) const {
  const torch::Tensor in = t.contiguous();
  torch::Tensor out = torch::empty_like(in);
  scale(in, out);
  return out;
}

torch::Tensor dropout_mask(uint64_t seed, double p, const torch::Tensor& like) {
  return dropout_masked(torch::ones_like(like, at::MemoryFormat::Contiguous), seed, p);
}

}  // namespace wg
