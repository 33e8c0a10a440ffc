// Norms (see header).
#include "wg/model/norms.h"

#include "wg/model/silu.h"

namespace wg {

torch::Tensor plain_layer_norm(const torch::Tensor& x, double eps) {
  return torch::layer_norm(x, {x.size(-1)}, {}, {}, eps);
}

LayerNormRun layer_norm_run(const torch::Tensor& x, double eps, const torch::Tensor& weight,
                            const torch::Tensor& bias) {
  auto [out, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, weight, bias, eps);
  return {out, mean, rstd};
}

torch::Tensor plain_layer_norm_backward(const torch::Tensor& dy, const torch::Tensor& x, const LayerNormRun& run) {
  return std::get<0>(at::native_layer_norm_backward(dy, x, {x.size(-1)}, run.mean, run.rstd, {}, {}, {true, false, false}));
}

AdaLayerNormImpl::AdaLayerNormImpl(int64_t dim, int64_t dim_aux, double eps) : dim_(dim), eps_(eps) {
  in_ = torch::nn::Linear(dim_aux, 4 * dim_aux);
  out_ = torch::nn::Linear(4 * dim_aux, 2 * dim);
  embed_aux = register_module("embed_aux", torch::nn::ModuleList(in_, torch::nn::SiLU(), out_));
}

torch::Tensor AdaLayerNormImpl::forward(const torch::Tensor& x, const torch::Tensor& aux) {
  return prelude(aux, Saving::All).fn(x);
}

Prelude AdaLayerNormImpl::prelude(const torch::Tensor& aux, Saving saving) {
  // embed_aux.0 and .1 as the second product's prelude: lean, it keeps aux
  // (which every AdaLayerNorm of the layer reads) and runs the a -> 4a
  // product again rather than keep its 4a-wide output.
  Prelude embed;
  embed.fn = [in = in_](const torch::Tensor& a) mutable { return wg::silu(in(a)); };
  embed.params = in_->parameters();  // weight, bias
  // Its rerun and vjp call what autograd calls for Linear on rows (addmm)
  // and SiLU (AddmmBackward0, wg::silu's kernels, the bias's gradient
  // summed to its shape), so the gradients stay bit-identical, and hold two 4a-wide
  // tensors at most instead of autograd's four. Rows only: other shapes
  // take other kernels (they run again under autograd).
  if (aux.dim() == 2 && aux.size(0) > 1 && aux.size(1) > 1 && aux.is_contiguous()) {
    embed.rerun = [w = in_->weight, b = in_->bias, d_aux = aux.requires_grad()](const torch::Tensor& a) {
      torch::Tensor z = at::addmm(b, a, w.t());
      const torch::Tensor h = silu_runs_on(z) ? silu_forward(z) : torch::silu(z);
      return PreludeRun{h, [w, b, a, z, d_aux](torch::Tensor dh) {
                          dh = dh.contiguous();
                          const torch::Tensor dz =  // in place
                              silu_runs_on(z) ? silu_backward(dh, z, dh) : at::silu_backward_out(dh, dh, z);
                          return std::vector<torch::Tensor>{d_aux ? dz.mm(w) : torch::Tensor(), dz.t().mm(a),
                                                            at::sum_to(dz, b.sizes())};
                        }};
    };
  }
  const torch::Tensor z = fused_linear(aux, embed, {out_->weight}, {out_->bias}, saving);
  const auto halves = z.split(dim_, -1);  // scale, shift
  return modulated_norm_prelude(eps_, halves[0], halves[1]);
}

}  // namespace wg
