// GELU then dropout in one pass (see header).
//
// Forward: h = x · Φ(x) · mask; backward: dx = dh · mask · (Φ(x) + x · φ(x)),
// Φ(x) = (1 + erf(x / √2)) / 2, φ(x) = e^(-x²/2) / √(2π); element j takes
// mask draw j. The loops are compiled for AVX-512 (with AVX512DQ, which
// multiplies the mask's 64-bit lanes), AVX2 and the baseline, and the best
// the CPU has is chosen (wg/util/vector_isa.h); the file is compiled
// without contraction (CMakeLists.txt), so an element's bits do not depend
// on where it falls in a range.
#include "wg/model/gelu_dropout.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>

#include "vector_math.h"
#include "wg/model/dropout.h"
#include "dropout_draw.h"
#include "wg/util/vector_isa.h"

namespace wg {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kGrain = 16384;  // elements per parallel task

// Φ(x), and Φ(x) + x·φ(x) (GELU's slope), as ATen's GELU kernels compute
// them; for float the slope takes e^(-x²/2) once for both terms (the erf of
// x / √2 needs the same exponential).
template <bool Fma>
inline __attribute__((always_inline)) float cdf(float x) {
  return 0.5f * (1.0f + vmath::erf_as<Fma>(x * 0.70710678118654752f));
}
template <bool Fma>
inline __attribute__((always_inline)) float slope(float x) {
  const float a = vmath::abs_of(x * 0.70710678118654752f);
  const float e = vmath::cephes_exp<Fma>(-(a * a));
  const float erf = vmath::with_sign_of(vmath::erf_abs_as<Fma>(a, e), x);
  return 0.5f * (1.0f + erf) + x * (0.39894228040143268f * e);
}
template <bool Fma>
inline __attribute__((always_inline)) double cdf(double x) {
  return 0.5 * (1.0 + std::erf(x * 0.70710678118654752440));
}
template <bool Fma>
inline __attribute__((always_inline)) double slope(double x) {
  return cdf<Fma>(x) + x * (0.39894228040143267794 * std::exp(-0.5 * x * x));
}

// Ranges are worked through in blocks of kDropoutBlock elements: with
// dropout, first the block's mask factors (dropout_factors: 64-bit lanes)
// into a buffer, then the GELU (32-bit lanes) reading them, loops that
// each vectorise, where one loop mixing both did not.
template <bool Fma, bool Mask, typename T>
inline __attribute__((always_inline)) void forward_impl(const T* x, T* h, int64_t n, int64_t first, uint64_t seed,
                                                        uint32_t threshold, T scale) {
  T factors[kDropoutBlock];
  for (int64_t b = 0; b < n; b += kDropoutBlock) {
    const int64_t m = std::min(kDropoutBlock, n - b);
    if constexpr (Mask) dropout_factors(seed, first + b, m, threshold, scale, factors);
    const T* __restrict a = x + b;
    T* __restrict o = h + b;
    const T* __restrict f = factors;
    for (int64_t i = 0; i < m; ++i) {
      T v = a[i] * cdf<Fma>(a[i]);
      if constexpr (Mask) v *= f[i];
      o[i] = v;
    }
  }
}

// dx from g: into out, or in place (out == g; written with one pointer,
// so that both forms vectorise).
template <bool Fma, bool Mask, typename T>
inline __attribute__((always_inline)) void backward_impl(const T* g, const T* x, T* out, int64_t n, int64_t first,
                                                         uint64_t seed, uint32_t threshold, T scale) {
  T factors[kDropoutBlock];
  for (int64_t b = 0; b < n; b += kDropoutBlock) {
    const int64_t m = std::min(kDropoutBlock, n - b);
    if constexpr (Mask) dropout_factors(seed, first + b, m, threshold, scale, factors);
    const T* __restrict a = x + b;
    const T* __restrict f = factors;
    if (g == out) {
      T* o = out + b;
      for (int64_t i = 0; i < m; ++i) o[i] = (Mask ? o[i] * f[i] : o[i]) * slope<Fma>(a[i]);
    } else {
      const T* __restrict d = g + b;
      T* __restrict o = out + b;
      for (int64_t i = 0; i < m; ++i) o[i] = (Mask ? d[i] * f[i] : d[i]) * slope<Fma>(a[i]);
    }
  }
}

template <typename T>
using ForwardFn = void (*)(const T*, T*, int64_t, int64_t, uint64_t, uint32_t, T);
template <typename T>
using BackwardFn = void (*)(const T*, const T*, T*, int64_t, int64_t, uint64_t, uint32_t, T);

#define WG_GELU_RANGES(suffix, fma, attributes)                                                              \
  template <bool Mask, typename T>                                                                           \
  attributes void forward_##suffix(const T* x, T* h, int64_t n, int64_t first, uint64_t seed, uint32_t th,  \
                                   T scale) {                                                                \
    forward_impl<fma, Mask>(x, h, n, first, seed, th, scale);                                                \
  }                                                                                                          \
  template <bool Mask, typename T>                                                                           \
  attributes void backward_##suffix(const T* g, const T* x, T* out, int64_t n, int64_t first, uint64_t seed, \
                                    uint32_t th, T scale) {                                                  \
    backward_impl<fma, Mask>(g, x, out, n, first, seed, th, scale);                                          \
  }
WG_GELU_RANGES(avx512, true, __attribute__((target("avx512f,avx512dq"))))
WG_GELU_RANGES(avx2, true, __attribute__((target("avx2,fma"))))
WG_GELU_RANGES(base, false, )
#undef WG_GELU_RANGES

template <bool Mask, typename T>
ForwardFn<T> forward_range() {
  return by_vector_isa(forward_avx512<Mask, T>, forward_avx2<Mask, T>, forward_base<Mask, T>);
}
template <bool Mask, typename T>
BackwardFn<T> backward_range() {
  return by_vector_isa(backward_avx512<Mask, T>, backward_avx2<Mask, T>, backward_base<Mask, T>);
}

// Runs fn(begin, end, threshold, scale) over [0, n) in parallel ranges.
template <typename T, typename F>
void run(int64_t n, double p, const F& fn) {
  const uint32_t threshold = p > 0 ? dropout_threshold(p) : 0;
  const T scale = p > 0 ? T(1) / T(1.0 - p) : T(1);
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) { fn(begin, end, threshold, scale); });
}

void check(const torch::Tensor& x, const char* what) {
  TORCH_CHECK(gelu_dropout_runs_on(x) && x.is_contiguous(), what, ": a contiguous float32/float64 CPU tensor, got ",
              x.scalar_type(), " on ", x.device(), x.is_contiguous() ? "" : " (not contiguous)");
}

struct GeluDropoutFunction : public torch::autograd::Function<GeluDropoutFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double p, int64_t seed) {
    const torch::Tensor xc = x.contiguous();
    ctx->save_for_backward({xc});
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    return gelu_dropout_forward(xc, uint64_t(seed), p);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const double p = ctx->saved_data["p"].toDouble();
    const uint64_t seed = uint64_t(ctx->saved_data["seed"].toInt());
    return {gelu_dropout_backward(grads[0].contiguous(), x, seed, p, torch::empty_like(x)), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

bool gelu_dropout_runs_on(const torch::Tensor& x) {
  return x.device().is_cpu() && (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble);
}

torch::Tensor gelu_dropout_forward(const torch::Tensor& x, uint64_t seed, double p) {
  check(x, "gelu_dropout_forward");
  TORCH_CHECK(p >= 0 && p < 1, "gelu_dropout_forward: p must be in [0, 1), got ", p);
  torch::Tensor h = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gelu_dropout_forward", [&] {
    const auto fn = p > 0 ? forward_range<true, scalar_t>() : forward_range<false, scalar_t>();
    const scalar_t* in = x.data_ptr<scalar_t>();
    scalar_t* out = h.data_ptr<scalar_t>();
    run<scalar_t>(x.numel(), p, [&](int64_t b, int64_t e, uint32_t threshold, scalar_t scale) {
      fn(in + b, out + b, e - b, b, seed, threshold, scale);
    });
  });
  return h;
}

torch::Tensor gelu_dropout_backward(const torch::Tensor& dh, const torch::Tensor& x, uint64_t seed, double p,
                                    torch::Tensor out) {
  check(x, "gelu_dropout_backward");
  check(dh, "gelu_dropout_backward");
  check(out, "gelu_dropout_backward");
  TORCH_CHECK(dh.sizes() == x.sizes() && out.sizes() == x.sizes() && dh.scalar_type() == x.scalar_type() &&
                  out.scalar_type() == x.scalar_type(),
              "gelu_dropout_backward: the gradient ", dh.sizes(), " or out ", out.sizes(), " does not match x ",
              x.sizes());
  TORCH_CHECK(p >= 0 && p < 1, "gelu_dropout_backward: p must be in [0, 1), got ", p);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gelu_dropout_backward", [&] {
    const auto fn = p > 0 ? backward_range<true, scalar_t>() : backward_range<false, scalar_t>();
    const scalar_t *g = dh.data_ptr<scalar_t>(), *in = x.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    run<scalar_t>(x.numel(), p, [&](int64_t b, int64_t e, uint32_t threshold, scalar_t scale) {
      fn(g + b, in + b, o + b, e - b, b, seed, threshold, scale);
    });
  });
  return out;
}

torch::Tensor gelu_dropout(const torch::Tensor& x, double p, bool training) {
  const bool drops = training && p > 0;
  if (!gelu_dropout_runs_on(x)) return wg::dropout(torch::gelu(x), p, training);
  TORCH_CHECK(!drops || p < 1, "gelu_dropout: p must be below 1, got ", p);
  const int64_t seed = drops ? int64_t(draw_dropout_seed()) : 0;
  return GeluDropoutFunction::apply(x, drops ? p : 0.0, seed);
}

}  // namespace wg
