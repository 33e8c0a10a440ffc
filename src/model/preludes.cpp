// The preludes of the model's layers that have a rerun (lean_ops.h): a
// layer norm, plain or affine; LN · factor + shift (AdaLayerNorm's
// modulation, the read-out's per-channel norms); GELU and its dropout.
// Each runs again without a graph and takes its vector-Jacobian product
// with the kernels autograd would call, so a lean backward gives
// autograd's bits (LeanOps.PreludeRerunsGiveAutogradsGradients).
#include <utility>
#include <vector>

#include "wg/model/dropout.h"
#include "wg/model/gelu_dropout.h"
#include "wg/model/layer_norm_again.h"
#include "wg/model/lean_ops.h"
#include "wg/model/norms.h"

namespace wg {
namespace {

// dx of a layer norm without weights at x from dh (its backward kernel,
// whose rows are independent), written into dh's memory a block of rows at
// a time: no second tensor of dh's size. Bit for bit what one call gives.
torch::Tensor plain_layer_norm_backward_into(torch::Tensor dh, const torch::Tensor& x, const torch::Tensor& mean,
                                             const torch::Tensor& rstd) {
  const int64_t d = x.size(-1);
  if (!dh.is_contiguous()) dh = dh.contiguous();
  const torch::Tensor g = dh.view({-1, d}), xs = x.reshape({-1, d}), m = mean.reshape({-1, 1}),
                      r = rstd.reshape({-1, 1});
  const int64_t rows = g.size(0), block = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(d, 1));
  for (int64_t i = 0; i < rows; i += block) {
    const int64_t e = std::min(rows, i + block);
    g.slice(0, i, e).copy_(plain_layer_norm_backward(g.slice(0, i, e), xs.slice(0, i, e),
                                                     LayerNormRun{{}, m.slice(0, i, e), r.slice(0, i, e)}));
  }
  return dh;
}

// A lean layer norm's first run, leaving its row statistics in kept
// (mean, rstd) where layer_norm_again can make its output again from them.
torch::Tensor layer_norm_keeping(const torch::Tensor& x, double eps, const torch::Tensor& weight,
                                 const torch::Tensor& bias, std::vector<torch::Tensor>& kept) {
  if (!layer_norm_again_runs_on(x)) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  LayerNormRun n = layer_norm_run(x, eps, weight, bias);
  kept = {std::move(n.mean), std::move(n.rstd)};
  return n.out;
}

// The norm run again at x (the first run's x, or its bits): from the first
// run's statistics in kept, one elementwise pass with the first run's
// bits (layer_norm_again.h), or native_layer_norm again.
LayerNormRun layer_norm_rerun(const torch::Tensor& x, double eps, const torch::Tensor& weight,
                              const torch::Tensor& bias, const std::vector<torch::Tensor>& kept) {
  if (kept.size() == 2 && layer_norm_again_runs_on(x))
    return {layer_norm_again(x, kept[0], kept[1], weight, bias), kept[0], kept[1]};
  return layer_norm_run(x, eps, weight, bias);
}

}  // namespace

Prelude layer_norm_prelude(double eps, const torch::Tensor& weight, const torch::Tensor& bias) {
  Prelude pre;
  pre.fn = [eps, weight, bias](const torch::Tensor& x) {
    return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  };
  pre.keeping = [eps, weight, bias](const torch::Tensor& x, std::vector<torch::Tensor>& kept) {
    return layer_norm_keeping(x, eps, weight, bias, kept);
  };
  if (weight.defined()) pre.params = {weight, bias};
  pre.rerun_kept = [eps, weight, bias](const torch::Tensor& x, const std::vector<torch::Tensor>& kept) {
    const LayerNormRun n = layer_norm_rerun(x, eps, weight, bias, kept);
    return PreludeRun{
        n.out, [eps, weight, bias, x, mean = n.mean, rstd = n.rstd](torch::Tensor dh) {
          // NativeLayerNormBackward0's call: the same kernel, the same mask
          const bool affine = weight.defined();
          if (!affine) return std::vector<torch::Tensor>{plain_layer_norm_backward_into(std::move(dh), x, mean, rstd)};
          auto [dx, dw, db] = at::native_layer_norm_backward(dh, x, {x.size(-1)}, mean, rstd, weight, bias,
                                                             {true, weight.requires_grad(), bias.requires_grad()});
          return std::vector<torch::Tensor>{dx, dw, db};
        }};
  };
  pre.rerun = [rerun_kept = pre.rerun_kept](const torch::Tensor& x) { return rerun_kept(x, {}); };
  return pre;
}

namespace {
// LN_eps(x) · factor + shift, factor computed from factor_param (which gets
// its gradient: both have its shape, factor = factor_param or 1 + it).
Prelude norm_affine_prelude(double eps, const torch::Tensor& factor_param, const torch::Tensor& factor,
                            const torch::Tensor& shift) {
  Prelude pre;
  pre.fn = [eps, factor, shift](const torch::Tensor& x) {
    return torch::layer_norm(x, {x.size(-1)}, {}, {}, eps) * factor + shift;
  };
  pre.keeping = [eps, factor, shift](const torch::Tensor& x, std::vector<torch::Tensor>& kept) {
    return layer_norm_keeping(x, eps, {}, {}, kept) * factor + shift;
  };
  const bool d_factor = factor_param.requires_grad(), d_shift = shift.requires_grad();
  if (d_factor) pre.params.push_back(factor_param);
  if (d_shift) pre.params.push_back(shift);
  pre.rerun_kept = [eps, factor_param, factor, shift, d_factor, d_shift](const torch::Tensor& x,
                                                                         const std::vector<torch::Tensor>& kept) {
    LayerNormRun n = layer_norm_rerun(x, eps, {}, {}, kept);
    torch::Tensor h = n.out * factor;
    h.add_(shift);  // the bits of n.out · factor + shift, with no second temporary of x's size
    return PreludeRun{std::move(h), [factor_param, factor, shift, d_factor, d_shift, x, n](torch::Tensor dh) mutable {
                        // What autograd's AddBackward0, MulBackward0 (grad · other, summed
                        // to each operand's shape) and NativeLayerNormBackward0 compute,
                        // with no tensor of x's size but dh and the norm's output held
                        // at once (the embed's read-out: the step's peak at cpu_wide was
                        // in this vjp): the factor's gradient in the norm's output
                        // (n.out · dh, the bits of dh · n.out), which is then let go;
                        // the shift's, a sum of dh (or dh itself, then not written);
                        // then dh · factor and the norm's backward in dh's own memory.
                        std::vector<torch::Tensor> d(1);
                        if (d_factor) d.push_back(at::sum_to(n.out.mul_(dh), factor_param.sizes()));
                        n.out = torch::Tensor();
                        if (d_shift) d.push_back(at::sum_to(dh, shift.sizes()));
                        const bool dh_is_a_gradient = d_shift && d.back().is_alias_of(dh);
                        if (dh_is_a_gradient || dh.sizes() != x.sizes()) {
                          d[0] = plain_layer_norm_backward(dh * factor, x, n);
                        } else {
                          d[0] = plain_layer_norm_backward_into(dh.mul_(factor), x, n.mean, n.rstd);
                        }
                        return d;
                      }};
  };
  pre.rerun = [rerun_kept = pre.rerun_kept](const torch::Tensor& x) { return rerun_kept(x, {}); };
  return pre;
}
}  // namespace

Prelude modulated_norm_prelude(double eps, const torch::Tensor& scale, const torch::Tensor& shift) {
  return norm_affine_prelude(eps, scale, 1 + scale, shift);
}

Prelude channel_norm_prelude(double eps, const torch::Tensor& weight, const torch::Tensor& bias) {
  return norm_affine_prelude(eps, weight, weight, bias);
}

Prelude gelu_dropout_prelude(double dropout, bool training) {
  Prelude pre;
  pre.fn = [dropout, training](const torch::Tensor& x) { return gelu_dropout(x, dropout, training); };
  pre.draws_random = dropout > 0 && training;
  // GELU, then (drawing) the mask from the seed gelu_dropout would draw;
  // its vjp is what GeluDropoutFunction's backward computes, written into
  // dh (theirs). Off the CPU: torch::gelu, the mask, and the vjps of
  // DropoutFunction and GeluBackward0.
  pre.rerun = [dropout, draws = pre.draws_random](const torch::Tensor& x) {
    if (gelu_dropout_runs_on(x)) {
      const torch::Tensor xc = x.contiguous();
      const uint64_t seed = draws ? draw_dropout_seed() : 0;
      const double p = draws ? dropout : 0.0;
      return PreludeRun{gelu_dropout_forward(xc, seed, p), [xc, seed, p](const torch::Tensor& dh) {
                          const torch::Tensor g = dh.contiguous();
                          return std::vector<torch::Tensor>{gelu_dropout_backward(g, xc, seed, p, g)};
                        }};
    }
    torch::Tensor h = torch::gelu(x);
    // Both vjps write into dh (theirs): GELU's backward elementwise in place.
    const auto gelu_vjp = [x](torch::Tensor g) { return std::vector<torch::Tensor>{at::gelu_backward_out(g, g, x)}; };
    if (!draws) return PreludeRun{h, [gelu_vjp](torch::Tensor dh) { return gelu_vjp(dh.contiguous()); }};
    const uint64_t seed = draw_dropout_seed();
    apply_dropout_mask_(h, seed, dropout);
    return PreludeRun{h, [gelu_vjp, seed, dropout](torch::Tensor dh) {
                        torch::Tensor g = dh.contiguous();
                        apply_dropout_mask_(g, seed, dropout);
                        return gelu_vjp(g);
                      }};
  };
  return pre;
}

}  // namespace wg
