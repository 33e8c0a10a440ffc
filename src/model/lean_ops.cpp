// fused_linear (see header).
//
// Invariants of FusedLinearFunction:
// - its inputs are one list: x (or pre(x) when pre ran outside, under
//   autograd), pre's tensors, the weights, the biases; the gradients come
//   back in that order after one empty slot for the holder;
// - it keeps x and the weights (and, lean, pre's tensors); never the
//   product's output, never pre(x) when lean;
// - backward: dW = Gᵀ·h and db = ΣG over rows, dh = G·W; lean, h is pre(x)
//   run again, with the generators as at the first run when pre draws: by
//   pre's rerun, whose vjp takes dh back to x and pre's tensors with the
//   kernels autograd would call, or, for a pre without one, under autograd,
//   and dh goes back through it with autograd::grad; with a rerun, pre's
//   output is dropped once dW is taken, before dh is allocated, and the vjp
//   takes dh over (a plain layer norm's writes dx there), so a lean
//   backward holds no more at once than it must;
// - lean with a joint pre (the attention core run again, Prelude::joint):
//   dh = G·W first, then pre's run and its vjp in one pass give h (the
//   first run's bits) and the gradients, then dW = Gᵀ·h: h and dh are
//   held at once;
// - lean, backward lets go of pre (its closures hold tensors) once it has
//   run: a second backward through the same product is refused;
// - unread (output_linear under Saving::Rerun): forward computes no
//   product and returns zeros of its shape; backward, which never reads
//   the output, is the same. With a joint pre (the attention core) it is
//   lean as well, and its forward does not run pre either: the joint pass
//   in backward gives h, so a recomputed attention piece runs its core
//   once, as forward and backward in one pass, instead of a forward and
//   then a backward that computes the scores again.
#include "wg/model/lean_ops.h"

#include "recorded_bmm.h"
#include "wg/model/grouped_rows.h"

#include <algorithm>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "wg/util/generator_state.h"

namespace wg {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Layout : torch::CustomClassHolder {
  Prelude pre;
  bool lean = false;
  size_t num_pre = 0, num_weights = 0, num_biases = 0;
  bool grouped = false;       // grouped_linear: group g of the input through weight g
  bool on_rows = false;       // grouped, forward and backward on the rows in place (grouped_rows.h)
  bool unread = false;        // output_linear in a rerun: the product is not computed
  std::vector<int64_t> rows;  // output rows of each weight
  std::vector<GeneratorStates> first_run;  // lean with a random pre: the states before it ran (0 or 1)
  std::vector<torch::Tensor> kept;         // lean: what pre.keeping left for pre.rerun_kept
  bool released = false;  // after backward: pre, first_run and kept let go (their closures hold tensors)
};

// The weights as one operand: their rows [Σ out_i, in], read in place
// where they lie one after another in one storage (place_adjacent), else
// concatenated (100 MB a step at cpu_wide before they were placed so);
// grouped, stacked [G, out, in].
torch::Tensor joined(const Layout& l, const std::vector<torch::Tensor>& t) {
  if (l.grouped) return torch::stack(t);
  if (t.size() == 1) return t[0];
  if (!lie_adjacent(t)) return torch::cat(t, 0);
  std::vector<int64_t> sizes = t[0].sizes().vec();
  for (size_t i = 1; i < t.size(); ++i) sizes[0] += t[i].size(0);
  return t[0].detach().as_strided(sizes, t[0].strides(), t[0].storage_offset());
}

// h [..., G, in] as the groups' row blocks [G, N, in] (a view).
torch::Tensor by_group(const torch::Tensor& h) {
  return h.reshape({-1, h.size(-2), h.size(-1)}).transpose(0, 1);
}

// A grouped product runs on the rows in place (grouped_rows.h) on the CPU,
// in float or double, with at most this many outputs a group (the embed's
// read-out: a few a channel); elsewhere as one batched product over the
// groups. Decided by the weights alone, so forward and backward agree.
constexpr int64_t kRowsMaxOut = 32;
bool on_rows(const Layout& l, const std::vector<torch::Tensor>& weights) {
  const torch::Tensor& w = weights.front();
  return l.grouped && w.device().is_cpu() && (w.scalar_type() == torch::kFloat || w.scalar_type() == torch::kDouble) &&
         w.size(0) >= 1 && w.size(0) <= kRowsMaxOut && w.size(1) >= 1;
}

// x [..., G, in] as rows: how many.
int64_t rows_of(const torch::Tensor& x) { return x.numel() / std::max<int64_t>(1, x.size(-2) * x.size(-1)); }

// The product: y = h · Wᵀ + b.
torch::Tensor product(const Layout& l, const torch::Tensor& h, const std::vector<torch::Tensor>& weights,
                      const std::vector<torch::Tensor>& biases) {
  const torch::Tensor W = joined(l, weights), b = biases.empty() ? torch::Tensor() : joined(l, biases);
  if (!l.grouped) return torch::linear(h, W, b);
  if (l.on_rows) {
    const torch::Tensor x = h.contiguous();
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = W.size(1);
    torch::Tensor y = torch::empty(shape, x.options());
    const int64_t n = rows_of(x);
    recorded_as_bmm(W.size(0), n, W.size(2), W.size(1), [&] {
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "grouped_rows_forward", [&] {
        grouped_rows_forward<scalar_t>(x.data_ptr<scalar_t>(), W.data_ptr<scalar_t>(),
                                       b.defined() ? b.data_ptr<scalar_t>() : nullptr, n, W.size(0), W.size(2),
                                       W.size(1), y.data_ptr<scalar_t>());
      });
    });
    return y;
  }
  torch::Tensor y = torch::bmm(by_group(h), W.transpose(1, 2));  // [G, N, out]
  if (b.defined()) y.add_(b.unsqueeze(1));
  std::vector<int64_t> shape(h.sizes().begin(), h.sizes().end());
  shape.back() = W.size(1);
  return y.transpose(0, 1).reshape(shape);
}

// Zeros of the product's shape without computing it: one zero broadcast
// (no memory of the output's size; what reads it reads zeros).
torch::Tensor unread_output(const torch::Tensor& h, const std::vector<torch::Tensor>& weights) {
  std::vector<int64_t> shape(h.sizes().begin(), h.sizes().end());
  shape.back() = 0;
  for (const torch::Tensor& w : weights) shape.back() += w.size(0);
  return torch::zeros({1}, h.options()).expand(shape);
}

// t in dtype (t itself when it is). Under autocast the product ran in a
// lower precision: its gradient G comes in that dtype while h and the
// weights are float32. Backward then multiplies in G's dtype and gives
// each gradient its operand's dtype, as the backward of autocast's casts
// would (float32 throughout: no cast, the same bits).
torch::Tensor in_dtype(const torch::Tensor& t, c10::ScalarType dtype) {
  return t.scalar_type() == dtype ? t : t.to(dtype);
}

// The product's gradients from G (the output's, as rows) and H (its input,
// as rows), in the weights' dtype `param`.
void weight_grads(const Layout& l, const torch::Tensor& G, const torch::Tensor& H, c10::ScalarType param,
                  variable_list& result) {
  const size_t w0 = 1 + l.num_pre, b0 = w0 + l.num_weights;
  const auto parts = [&](const torch::Tensor& t) {
    const torch::Tensor p = in_dtype(t, param);
    return l.grouped ? p.unbind(0) : p.split_with_sizes(l.rows, 0);
  };
  torch::Tensor dW, db;
  if (l.on_rows) {  // G [..., G, out] and H [..., G, in] contiguous, of the weights' dtype
    const int64_t groups = H.size(-2), in = H.size(-1), out = G.size(-1), n = rows_of(H);
    dW = torch::empty({groups, out, in}, H.options());
    if (l.num_biases > 0) db = torch::empty({groups, out}, H.options());
    recorded_as_bmm(groups, out, n, in, [&] {
      AT_DISPATCH_FLOATING_TYPES(H.scalar_type(), "grouped_rows_weight_grad", [&] {
        grouped_rows_weight_grad<scalar_t>(G.data_ptr<scalar_t>(), H.data_ptr<scalar_t>(), n, groups, in, out,
                                           dW.data_ptr<scalar_t>(), db.defined() ? db.data_ptr<scalar_t>() : nullptr);
      });
    });
  } else {
    const torch::Tensor Hc = in_dtype(H, G.scalar_type());
    dW = l.grouped ? torch::bmm(G.transpose(1, 2), Hc) : G.t().mm(Hc);
    if (l.num_biases > 0) db = G.sum(l.grouped ? 1 : 0);
  }
  const auto dWs = parts(dW);
  for (size_t i = 0; i < l.num_weights; ++i) result[1 + w0 + i] = dWs[i];
  if (db.defined()) {
    const auto dbs = parts(db);
    for (size_t i = 0; i < l.num_biases; ++i) result[1 + b0 + i] = dbs[i];
  }
}

// A lean backward through a joint prelude (not grouped): dh = G · W first,
// then pre's run and vjp in one (its h the first run's), then the product's
// weight gradients from h.
variable_list joint_backward(const Layout& l, const torch::Tensor& x, const torch::Tensor& grad,
                             const std::vector<torch::Tensor>& pre_params, const std::vector<torch::Tensor>& weights,
                             bool x_requires_grad) {
  TORCH_CHECK(!l.grouped, "fused_linear: a joint prelude with grouped weights");
  variable_list result(1 + 1 + l.num_pre + l.num_weights + l.num_biases);
  const torch::Tensor W = joined(l, weights), G = grad.reshape({-1, grad.size(-1)});
  std::vector<int64_t> h_sizes(x.sizes().begin(), x.sizes().end());
  h_sizes.back() = W.size(1);
  Prelude::JointRun run;
  {
    const GeneratorStatesGuard put_back(x.device());
    if (!l.first_run.empty()) l.first_run.front().restore();
    run = l.pre.joint(x, in_dtype(G.mm(in_dtype(W, G.scalar_type())), x.scalar_type()).view(h_sizes));
  }
  weight_grads(l, G, run.h.reshape({-1, run.h.size(-1)}), W.scalar_type(), result);
  if (x_requires_grad) result[1] = run.grads[0];
  for (size_t i = 0; i < pre_params.size(); ++i)
    if (pre_params[i].requires_grad()) result[2 + i] = run.grads[1 + i];
  return result;
}

// A lean product's input made again (Prelude::input_again), without a graph.
torch::Tensor made_again(const std::function<torch::Tensor()>& again) {
  const torch::NoGradGuard no_grad;
  return again();
}

struct FusedLinearFunction : public torch::autograd::Function<FusedLinearFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const c10::intrusive_ptr<Layout>& layout, at::TensorList inputs) {
    const Layout& l = *layout;
    const torch::Tensor& x = inputs[0];
    const size_t w0 = 1 + l.num_pre, b0 = w0 + l.num_weights;
    const std::vector<torch::Tensor> weights(inputs.begin() + long(w0), inputs.begin() + long(b0));
    const std::vector<torch::Tensor> biases(inputs.begin() + long(b0), inputs.end());
    torch::Tensor h = x;  // unread: only h's leading dimensions are read, which pre keeps
    if (l.lean && l.pre.fn) {
      if (l.pre.draws_random) layout->first_run.push_back(GeneratorStates::capture(x.device()));
      if (!l.unread) h = l.pre.keeping ? l.pre.keeping(x, layout->kept) : l.pre.fn(x);
    }
    const torch::Tensor y = l.unread ? unread_output(h, weights) : product(l, h, weights, biases);
    // Lean with input_again, x is made again in backward: not kept.
    variable_list keep{l.lean && l.pre.input_again ? torch::Tensor() : x};
    if (l.lean) keep.insert(keep.end(), inputs.begin() + 1, inputs.begin() + long(w0));
    keep.insert(keep.end(), weights.begin(), weights.end());
    ctx->save_for_backward(keep);
    ctx->saved_data["layout"] = c10::IValue::make_capsule(layout);
    ctx->saved_data["x_requires_grad"] = x.requires_grad();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto layout = c10::static_intrusive_pointer_cast<Layout>(ctx->saved_data["layout"].toCapsule());
    TORCH_CHECK(!layout->released, "fused_linear: backward through the same lean product a second time "
                                   "(retain_graph is not supported: it lets go of its prelude after its backward)");
    variable_list result = backward_once(ctx, *layout, std::move(grads));
    if (layout->lean) {
      // The prelude's closures hold what it read (cross-attention's keys
      // and values, AdaLayerNorm's scale and shift): let go of them now,
      // not when the graph is destroyed after the whole backward.
      layout->pre = Prelude{};
      layout->first_run.clear();
      layout->kept.clear();
      layout->released = true;
    }
    return result;
  }

  static variable_list backward_once(AutogradContext* ctx, const Layout& l, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const size_t kept_pre = l.lean ? l.num_pre : 0;
    const std::vector<torch::Tensor> pre_params(saved.begin() + 1, saved.begin() + 1 + long(kept_pre));
    const std::vector<torch::Tensor> weights(saved.begin() + 1 + long(kept_pre), saved.end());
    const bool x_requires_grad = ctx->saved_data["x_requires_grad"].toBool();
    // x as forward had it: kept, or made again.
    const torch::Tensor x_kept = l.lean && l.pre.input_again ? made_again(l.pre.input_again) : saved[0];

    if (l.lean && l.pre.joint)
      return joint_backward(l, x_kept.detach(), grads[0], pre_params, weights, x_requires_grad);
    // h: the product's input, kept or run again (by pre's own rerun, or under autograd).
    torch::Tensor x = x_kept, h = x;
    PreludeRun rerun;
    if (l.lean && l.pre.rerun) {
      const GeneratorStatesGuard put_back(x.device());
      if (!l.first_run.empty()) l.first_run.front().restore();
      rerun = l.pre.rerun_kept ? l.pre.rerun_kept(x_kept.detach(), l.kept) : l.pre.rerun(x_kept.detach());
      h = rerun.h;
    } else if (l.lean && l.pre.fn) {
      x = x_kept.detach();
      if (x_requires_grad) x.requires_grad_(true);
      const GeneratorStatesGuard put_back(x.device());
      if (!l.first_run.empty()) l.first_run.front().restore();
      torch::autograd::AutoGradMode grad_on(true);
      h = l.pre.fn(x);
    }
    const size_t w0 = 1 + l.num_pre, b0 = w0 + l.num_weights;
    variable_list result(1 + b0 + l.num_biases);  // the holder's slot, x, pre's tensors, weights, biases
    // G: the output's gradient, H: the product's input, as rows ([N, ·]) or
    // groups of rows ([G, N, ·]); on rows in place as they lie ([..., G, ·]).
    const torch::Tensor G = l.on_rows   ? grads[0].contiguous()
                            : l.grouped ? by_group(grads[0])
                                        : grads[0].reshape({-1, grads[0].size(-1)});
    torch::Tensor H = l.on_rows   ? h.detach().contiguous()
                      : l.grouped ? by_group(h.detach())
                                  : h.detach().reshape({-1, h.size(-1)});
    const std::vector<int64_t> h_sizes = h.sizes().vec();
    const c10::ScalarType h_dtype = h.scalar_type();
    weight_grads(l, G, H, weights.front().scalar_type(), result);
    // A rerun's h is read no more (its vjp holds what it needs): freed
    // before dh is allocated, so the two are never held at once.
    if (rerun.vjp) H = h = rerun.h = torch::Tensor();

    bool wants_dh = x_requires_grad;
    for (const torch::Tensor& p : pre_params) wants_dh = wants_dh || p.requires_grad();
    if (!wants_dh) return result;
    const torch::Tensor W = in_dtype(joined(l, weights), G.scalar_type());
    torch::Tensor dH;
    if (l.on_rows) {
      dH = torch::empty(h_sizes, G.options());
      const int64_t n = rows_of(dH);
      recorded_as_bmm(W.size(0), n, W.size(1), W.size(2), [&] {
        AT_DISPATCH_FLOATING_TYPES(G.scalar_type(), "grouped_rows_input_grad", [&] {
          grouped_rows_input_grad<scalar_t>(G.data_ptr<scalar_t>(), W.data_ptr<scalar_t>(), n, W.size(0), W.size(2),
                                            W.size(1), dH.data_ptr<scalar_t>());
        });
      });
    } else {
      dH = l.grouped ? torch::bmm(G, W).transpose(0, 1).reshape(h_sizes) : G.mm(W).view(h_sizes);
    }
    dH = in_dtype(dH, h_dtype);
    if (!(l.lean && l.pre.fn)) {
      result[1] = dH;
      return result;
    }
    if (rerun.vjp) {
      const std::vector<torch::Tensor> d = rerun.vjp(std::move(dH));
      if (x_requires_grad) result[1] = d[0];
      for (size_t i = 0; i < pre_params.size(); ++i)
        if (pre_params[i].requires_grad()) result[2 + i] = d[1 + i];
      return result;
    }
    variable_list wrt;
    std::vector<size_t> slot;
    if (x_requires_grad) {
      wrt.push_back(x);
      slot.push_back(1);
    }
    for (size_t i = 0; i < pre_params.size(); ++i)
      if (pre_params[i].requires_grad()) {
        wrt.push_back(pre_params[i]);
        slot.push_back(2 + i);
      }
    if (!h.requires_grad()) return result;
    const variable_list d = torch::autograd::grad({h}, wrt, {dH}, /*retain_graph=*/false, /*create_graph=*/false,
                                                  /*allow_unused=*/true);
    for (size_t i = 0; i < d.size(); ++i) result[slot[i]] = d[i];
    return result;
  }
};

}  // namespace

namespace {
torch::Tensor linear_with_prelude(const char* what, bool grouped, const torch::Tensor& x, const Prelude& pre,
                                  const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& biases,
                                  Saving saving, bool output_read = true) {
  TORCH_CHECK(!weights.empty(), what, ": no weights");
  TORCH_CHECK(biases.empty() || biases.size() == weights.size(), what, ": ", biases.size(), " biases for ",
              weights.size(), " weights");
  TORCH_CHECK(!grouped || (x.dim() >= 2 && x.size(-2) == int64_t(weights.size())), what, ": ", weights.size(),
              " weights for an input of shape ", x.sizes(), " (groups on the second-to-last axis)");
  auto layout = c10::make_intrusive<Layout>();
  layout->grouped = grouped;
  layout->on_rows = on_rows(*layout, weights);
  layout->unread = !output_read && saving == Saving::Rerun;
  // Lean as Saving::Lean says; and an unread product whose pre runs jointly
  // with its backward: nothing reads pre's output before that backward.
  layout->lean = bool(pre.fn) && (saving == Saving::Lean || (layout->unread && bool(pre.joint)));
  layout->num_weights = weights.size();
  layout->num_biases = biases.size();
  for (const torch::Tensor& w : weights) layout->rows.push_back(w.size(0));
  std::vector<torch::Tensor> inputs;
  if (layout->lean) {
    layout->pre = pre;
    layout->num_pre = pre.params.size();
    inputs.push_back(x);
    inputs.insert(inputs.end(), pre.params.begin(), pre.params.end());
  } else {
    inputs.push_back(pre.fn ? pre.fn(x) : x);  // pre under autograd: its output kept, as a plain module's
  }
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  inputs.insert(inputs.end(), biases.begin(), biases.end());
  if (!at::GradMode::is_enabled())  // no graph: the plain product
    return product(*layout, layout->lean ? pre.fn(x) : inputs[0], weights, biases);
  return FusedLinearFunction::apply(layout, at::TensorList(inputs));  // a TensorList: each one an input of the graph
}
}  // namespace

torch::Tensor fused_linear(const torch::Tensor& x, const Prelude& pre, const std::vector<torch::Tensor>& weights,
                           const std::vector<torch::Tensor>& biases, Saving saving) {
  return linear_with_prelude("fused_linear", false, x, pre, weights, biases, saving);
}

torch::Tensor output_linear(const torch::Tensor& x, const Prelude& pre, const std::vector<torch::Tensor>& weights,
                            const std::vector<torch::Tensor>& biases, Saving saving) {
  return linear_with_prelude("output_linear", false, x, pre, weights, biases, saving, /*output_read=*/false);
}

bool lie_adjacent(const std::vector<torch::Tensor>& weights) {
  // Rows of numel / size(0) elements each, one after another: is_contiguous
  // alone says nothing of a dimension of size 1 or of an empty tensor.
  const auto plain_rows = [](const torch::Tensor& w) {
    return w.dim() >= 1 && w.numel() > 0 && w.is_contiguous() && w.stride(0) == w.numel() / w.size(0);
  };
  if (weights.empty() || !plain_rows(weights[0])) return false;
  const torch::Tensor& first = weights[0];
  for (size_t i = 1; i < weights.size(); ++i) {
    const torch::Tensor &w = weights[i], &before = weights[i - 1];
    if (!plain_rows(w) || w.scalar_type() != first.scalar_type() || w.device() != first.device() ||
        w.dim() != first.dim() || w.sizes().slice(1) != first.sizes().slice(1) ||
        !w.storage().is_alias_of(first.storage()) || w.storage_offset() != before.storage_offset() + before.numel())
      return false;
  }
  return true;
}

void place_adjacent(const std::vector<torch::Tensor>& params) {
  if (params.size() < 2 || lie_adjacent(params)) return;
  const torch::Tensor& first = params[0];
  std::vector<int64_t> sizes = first.sizes().vec();
  TORCH_CHECK(!sizes.empty(), "place_adjacent: scalar parameters");
  sizes[0] = 0;
  for (const torch::Tensor& p : params) {
    TORCH_CHECK(p.scalar_type() == first.scalar_type() && p.device() == first.device() && p.dim() == first.dim() &&
                    p.sizes().slice(1) == first.sizes().slice(1),
                "place_adjacent: parameters of one dtype, device and row shape, got ", p.sizes(), " and ",
                first.sizes());
    sizes[0] += p.size(0);
  }
  const torch::NoGradGuard no_grad;
  const torch::Tensor storage = torch::empty(sizes, first.options().requires_grad(false));
  int64_t row = 0;
  for (const torch::Tensor& p : params) {
    torch::Tensor slice = storage.narrow(0, row, p.size(0));
    slice.copy_(p);
    p.set_data(slice);
    row += p.size(0);
  }
}

torch::Tensor grouped_linear(const torch::Tensor& x, const Prelude& pre, const std::vector<torch::Tensor>& weights,
                             const std::vector<torch::Tensor>& biases, Saving saving) {
  return linear_with_prelude("grouped_linear", true, x, pre, weights, biases, saving);
}

}  // namespace wg
