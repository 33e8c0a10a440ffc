// SiLU in one vectorised pass (see header).
//
// The loops are compiled for AVX-512, AVX2 and the baseline, and the best
// the CPU has is chosen (wg/util/vector_isa.h); the file is compiled
// without contraction (CMakeLists.txt), so an element's bits do not depend
// on where it falls in a range, or on the thread count.
#include "wg/model/silu.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "vector_math.h"
#include "wg/util/vector_isa.h"

namespace wg {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kGrain = 16384;  // elements per parallel task

template <bool Fma, typename T>
inline __attribute__((always_inline)) void forward_impl(const T* __restrict x, T* __restrict h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = x[i] / (T(1) + vmath::exp_of<Fma>(-x[i]));
}

// dx from g: into out, or in place (out == g; written with one pointer,
// so that both forms vectorise).
template <bool Fma, typename T>
inline __attribute__((always_inline)) T slope_times(T g, T x) {
  const T s = T(1) / (T(1) + vmath::exp_of<Fma>(-x));
  return g * s * (T(1) + x * (T(1) - s));
}
template <bool Fma, typename T>
inline __attribute__((always_inline)) void backward_impl(const T* g, const T* __restrict x, T* out, int64_t n) {
  if (g == out) {
    for (int64_t i = 0; i < n; ++i) out[i] = slope_times<Fma>(out[i], x[i]);
  } else {
    const T* __restrict d = g;
    T* __restrict o = out;
    for (int64_t i = 0; i < n; ++i) o[i] = slope_times<Fma>(d[i], x[i]);
  }
}

template <typename T>
using ForwardFn = void (*)(const T*, T*, int64_t);
template <typename T>
using BackwardFn = void (*)(const T*, const T*, T*, int64_t);

#define WG_SILU_RANGES(suffix, fma, attributes)                                  \
  template <typename T>                                                          \
  attributes void forward_##suffix(const T* x, T* h, int64_t n) {                \
    forward_impl<fma>(x, h, n);                                                  \
  }                                                                              \
  template <typename T>                                                          \
  attributes void backward_##suffix(const T* g, const T* x, T* out, int64_t n) { \
    backward_impl<fma>(g, x, out, n);                                            \
  }
WG_SILU_RANGES(avx512, true, __attribute__((target("avx512f,avx512dq"))))
WG_SILU_RANGES(avx2, true, __attribute__((target("avx2,fma"))))
WG_SILU_RANGES(base, false, )
#undef WG_SILU_RANGES

void check(const torch::Tensor& x, const char* what) {
  TORCH_CHECK(silu_runs_on(x) && x.is_contiguous(), what, ": a contiguous float32/float64 CPU tensor, got ",
              x.scalar_type(), " on ", x.device(), x.is_contiguous() ? "" : " (not contiguous)");
}

struct SiluFunction : public torch::autograd::Function<SiluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x) {
    const torch::Tensor xc = x.contiguous();
    ctx->save_for_backward({xc});
    return silu_forward(xc);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    return {silu_backward(grads[0].contiguous(), x, torch::empty_like(x))};
  }
};

}  // namespace

bool silu_runs_on(const torch::Tensor& x) {
  return x.device().is_cpu() && (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble);
}

torch::Tensor silu_forward(const torch::Tensor& x) {
  check(x, "silu_forward");
  torch::Tensor h = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "silu_forward", [&] {
    const ForwardFn<scalar_t> fn =
        by_vector_isa(forward_avx512<scalar_t>, forward_avx2<scalar_t>, forward_base<scalar_t>);
    const scalar_t* in = x.data_ptr<scalar_t>();
    scalar_t* out = h.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) { fn(in + b, out + b, e - b); });
  });
  return h;
}

torch::Tensor silu_backward(const torch::Tensor& dh, const torch::Tensor& x, torch::Tensor out) {
  check(x, "silu_backward");
  check(dh, "silu_backward");
  check(out, "silu_backward");
  TORCH_CHECK(dh.sizes() == x.sizes() && out.sizes() == x.sizes() && dh.scalar_type() == x.scalar_type() &&
                  out.scalar_type() == x.scalar_type(),
              "silu_backward: the gradient ", dh.sizes(), " or out ", out.sizes(), " does not match x ", x.sizes());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "silu_backward", [&] {
    const BackwardFn<scalar_t> fn =
        by_vector_isa(backward_avx512<scalar_t>, backward_avx2<scalar_t>, backward_base<scalar_t>);
    const scalar_t *g = dh.data_ptr<scalar_t>(), *in = x.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) { fn(g + b, in + b, o + b, e - b); });
  });
  return out;
}

torch::Tensor silu(const torch::Tensor& x) {
  if (!silu_runs_on(x)) return torch::silu(x);
  return SiluFunction::apply(x);
}

}  // namespace wg
