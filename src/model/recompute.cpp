// The recomputation autograd Function (see header).
//
// Invariants:
// - forward runs the piece under NoGradGuard and saves its input and the
//   parameter tensors (references, no copies) and the generator states;
// - backward re-runs the piece (its rerun function when given) with grad
//   mode on from a detached copy of the input, with the generators set to
//   the saved states and put back after, then takes the gradients of input
//   and parameters with autograd::grad;
// - the gradients returned are in forward's input order: the piece and its
//   rerun (none), the input, each parameter.
#include "wg/model/recompute.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "wg/util/generator_state.h"

namespace wg {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The piece and the generator states of its first run, between forward and
// backward, inside the autograd context.
struct PieceHolder : torch::CustomClassHolder {
  PieceHolder(PieceFn f, GeneratorStates s) : fn(std::move(f)), first_run(std::move(s)) {}
  PieceFn fn;
  GeneratorStates first_run;
};

struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const PieceFn& fn, const PieceFn& rerun, const at::Tensor& x,
                            at::TensorList params) {
    ctx->saved_data["piece"] = c10::IValue::make_capsule(
        c10::make_intrusive<PieceHolder>(rerun ? rerun : fn, GeneratorStates::capture(x.device())));
    ctx->saved_data["x_requires_grad"] = x.requires_grad();
    variable_list to_save{x};
    to_save.insert(to_save.end(), params.begin(), params.end());
    ctx->save_for_backward(to_save);
    at::NoGradGuard no_grad;
    return fn(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const auto piece = c10::static_intrusive_pointer_cast<PieceHolder>(ctx->saved_data["piece"].toCapsule());
    const bool x_requires_grad = ctx->saved_data["x_requires_grad"].toBool();
    at::Tensor x = saved[0].detach();
    if (x_requires_grad) x.requires_grad_(true);

    at::Tensor out;
    {
      const GeneratorStatesGuard put_back(x.device());  // the draws after this backward stay as they were
      piece->first_run.restore();
      torch::autograd::AutoGradMode grad_on(true);
      out = piece->fn(x);
    }

    // Inputs of the recomputed graph we want gradients for.
    variable_list inputs;
    std::vector<int> slot;  // index into the returned list
    if (x_requires_grad) {
      inputs.push_back(x);
      slot.push_back(2);
    }
    for (size_t i = 1; i < saved.size(); ++i)
      if (saved[i].requires_grad()) {
        inputs.push_back(saved[i]);
        slot.push_back(int(i) + 2);
      }

    variable_list result(saved.size() + 2);  // fn, rerun, x, params...
    if (!inputs.empty() && out.requires_grad()) {
      auto grads = torch::autograd::grad({out}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                         /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t i = 0; i < grads.size(); ++i) result[slot[i]] = grads[i];
    }
    return result;
  }
};

}  // namespace

at::Tensor recomputed(const PieceFn& fn, const at::Tensor& x, at::TensorList params, const PieceFn& rerun) {
  return RecomputeFunction::apply(fn, rerun, x, params);
}

at::Tensor run_piece(bool recompute, const PieceFn& fn, const at::Tensor& x, at::TensorList params,
                     const PieceFn& rerun) {
  if (recompute && at::GradMode::is_enabled()) return recomputed(fn, x, params, rerun);
  return fn(x);
}

}  // namespace wg
