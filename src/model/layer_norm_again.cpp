// A layer norm made again from its row statistics (see header).
//
// The rows are compiled for AVX-512, AVX2 (with fused multiply-adds) and
// the baseline (without: ATen's baseline kernel cannot contract), and the
// best the CPU has is chosen (wg/util/vector_isa.h); the file is compiled
// without contraction (CMakeLists.txt), so the multiply-adds are where
// vmath::madd puts them.
#include "wg/model/layer_norm_again.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "vector_math.h"
#include "wg/util/vector_isa.h"

namespace wg {
namespace {

// How a LibTorch's CPU kernel makes a row's output from its statistics,
// before · weight + bias: 1.13's x · rstd + (-rstd · mean), one multiply-add
// where the CPU has them, or 2.x's (x - mean) · rstd (seen in Debian 13's
// 2.6: its bits at every width, and 0 at width 1, where the other form
// leaves the rounding of rstd · mean).
enum class Form { ScaleShift, Centered };

template <bool Fma, bool Affine, Form F>
inline __attribute__((always_inline)) void rows_impl(const float* x, const float* mean, const float* rstd,
                                                     const float* w, const float* b, float* y, int64_t begin,
                                                     int64_t end, int64_t d) {
  for (int64_t i = begin; i < end; ++i) {
    const float m = mean[i], scale = rstd[i], shift = -rstd[i] * mean[i];
    const float* __restrict xi = x + i * d;
    float* __restrict yi = y + i * d;
    for (int64_t j = 0; j < d; ++j) {
      const float v = F == Form::Centered ? (xi[j] - m) * scale : vmath::madd<Fma>(xi[j], scale, shift);
      yi[j] = Affine ? vmath::madd<Fma>(v, w[j], b[j]) : v;
    }
  }
}

using RowsFn = void (*)(const float*, const float*, const float*, const float*, const float*, float*, int64_t, int64_t,
                        int64_t);

#define WG_LN_ROWS(suffix, fma, attributes)                                                                           \
  template <bool Affine, Form F>                                                                                      \
  attributes void rows_##suffix(const float* x, const float* mean, const float* rstd, const float* w, const float* b, \
                                float* y, int64_t begin, int64_t end, int64_t d) {                                    \
    rows_impl<fma, Affine, F>(x, mean, rstd, w, b, y, begin, end, d);                                                 \
  }
WG_LN_ROWS(avx512, true, __attribute__((target("avx512f,avx512dq"))))
WG_LN_ROWS(avx2, true, __attribute__((target("avx2,fma"))))
WG_LN_ROWS(base, false, )
#undef WG_LN_ROWS

template <bool Affine, Form F>
RowsFn rows_fn() {
  return by_vector_isa<RowsFn>(rows_avx512<Affine, F>, rows_avx2<Affine, F>, rows_base<Affine, F>);
}

RowsFn rows_fn(bool affine, Form form) {
  if (form == Form::Centered) return affine ? rows_fn<true, Form::Centered>() : rows_fn<false, Form::Centered>();
  return affine ? rows_fn<true, Form::ScaleShift>() : rows_fn<false, Form::ScaleShift>();
}

// The layer norm from its statistics, in the given form.
torch::Tensor again(const torch::Tensor& x, const torch::Tensor& mean, const torch::Tensor& rstd,
                    const torch::Tensor& weight, const torch::Tensor& bias, Form form) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.is_contiguous() && x.dim() >= 1,
              "layer_norm_again: x must be a contiguous float32 CPU tensor, got ", x.scalar_type(), " on ", x.device());
  const int64_t d = x.size(-1), rows = d > 0 ? x.numel() / d : 0;
  TORCH_CHECK(mean.numel() == rows && rstd.numel() == rows && mean.scalar_type() == torch::kFloat &&
                  rstd.scalar_type() == torch::kFloat,
              "layer_norm_again: mean and rstd need one float32 value for each of x's ", rows, " rows, got ",
              mean.numel(), " and ", rstd.numel());
  const bool affine = weight.defined();
  TORCH_CHECK(affine == bias.defined() && (!affine || (weight.numel() == d && bias.numel() == d)),
              "layer_norm_again: weight and bias must both be given, with ", d, " values each, or neither");
  const torch::Tensor m = mean.contiguous(), r = rstd.contiguous();
  const torch::Tensor w = affine ? weight.contiguous() : torch::Tensor(),
                      b = affine ? bias.contiguous() : torch::Tensor();
  torch::Tensor y = torch::empty_like(x);
  const RowsFn fn = rows_fn(affine, form);
  const float *xp = x.data_ptr<float>(), *mp = m.data_ptr<float>(), *rp = r.data_ptr<float>();
  const float *wp = affine ? w.data_ptr<float>() : nullptr, *bp = affine ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1));  // rows a task
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) { fn(xp, mp, rp, wp, bp, yp, begin, end, d); });
  return y;
}

// The form whose bits native_layer_norm gives here, if either does.
std::optional<Form> native_form() {
  const torch::NoGradGuard no_grad;
  const auto generator = at::make_generator<at::CPUGeneratorImpl>(20261206);
  std::vector<Form> candidates = {Form::ScaleShift, Form::Centered};
  for (const int64_t d : {1, 7, 16, 32, 33, 64, 105, 256}) {
    const torch::Tensor x = at::randn({67, d}, generator) * 3 + 0.5;
    const torch::Tensor w = at::randn({d}, generator), b = at::randn({d}, generator);
    for (const bool affine : {false, true}) {
      const torch::Tensor weight = affine ? w : torch::Tensor(), bias = affine ? b : torch::Tensor();
      const auto [y, mean, rstd] = at::native_layer_norm(x, {d}, weight, bias, 1e-5);
      candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                      [&](Form f) { return !torch::equal(again(x, mean, rstd, weight, bias, f), y); }),
                       candidates.end());
    }
  }
  if (candidates.empty()) return std::nullopt;
  return candidates.front();
}

std::optional<Form> form_here() {
  static const std::optional<Form> form = native_form();
  return form;
}

}  // namespace

bool layer_norm_again_runs_on(const torch::Tensor& x) {
  return x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.is_contiguous() && x.dim() >= 1 &&
         layer_norm_again_matches();
}

bool layer_norm_again_matches() { return form_here().has_value(); }

torch::Tensor layer_norm_again(const torch::Tensor& x, const torch::Tensor& mean, const torch::Tensor& rstd,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
  return again(x, mean, rstd, weight, bias, form_here().value_or(Form::Centered));
}

}  // namespace wg
