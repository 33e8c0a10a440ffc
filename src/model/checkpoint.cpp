// The recomputation autograd Function (see header).
//
// Invariants:
// - forward runs the piece under NoGradGuard and saves its input and the
//   parameter tensors (references, no copies) and the generator states;
// - backward re-runs the piece with grad mode on from a detached copy of the
//   input, with the generators forked to the saved state and put back after,
//   then takes the gradients of input and parameters with autograd::grad;
// - the gradients returned are in forward's input order: the piece (none),
//   the input, each parameter.
#include "wg/model/checkpoint.h"

#include <ATen/Context.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <mutex>

namespace wg {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Holds the piece between forward and backward inside the autograd context.
struct PieceHolder : torch::CustomClassHolder {
  explicit PieceHolder(PieceFn f) : fn(std::move(f)) {}
  PieceFn fn;
};

// The generators a piece on `device` may draw from: always the CPU one,
// and the device's own for accelerators.
std::vector<at::Generator> generators_for(const at::Device& device) {
  std::vector<at::Generator> gens{at::globalContext().defaultGenerator(at::DeviceType::CPU)};
  if (device.type() != at::DeviceType::CPU) gens.push_back(at::globalContext().defaultGenerator(device));
  return gens;
}

std::vector<at::Tensor> get_states(std::vector<at::Generator>& gens) {
  std::vector<at::Tensor> states;
  for (auto& g : gens) {
    std::lock_guard<std::mutex> lock(g.mutex());  // held only for the copy
    states.push_back(g.get_state());
  }
  return states;
}

void set_states(std::vector<at::Generator>& gens, const std::vector<at::Tensor>& states) {
  for (size_t i = 0; i < gens.size(); ++i) {
    std::lock_guard<std::mutex> lock(gens[i].mutex());
    gens[i].set_state(states[i]);
  }
}

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(AutogradContext* ctx, const PieceFn& fn, const at::Tensor& x,
                            at::TensorList params) {
    auto gens = generators_for(x.device());
    auto states = get_states(gens);
    ctx->saved_data["piece"] = c10::IValue::make_capsule(c10::make_intrusive<PieceHolder>(fn));
    ctx->saved_data["rng"] = c10::List<at::Tensor>(states);
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

    auto gens = generators_for(x.device());
    auto now = get_states(gens);
    std::vector<at::Tensor> first;
    for (const at::Tensor& t : ctx->saved_data["rng"].toTensorList()) first.push_back(t);
    at::Tensor out;
    set_states(gens, first);
    try {
      torch::autograd::AutoGradMode grad_on(true);
      out = piece->fn(x);
    } catch (...) {
      set_states(gens, now);
      throw;
    }
    set_states(gens, now);

    // Inputs of the recomputed graph we want gradients for.
    variable_list inputs;
    std::vector<int> slot;  // index into the returned list
    if (x_requires_grad) { inputs.push_back(x); slot.push_back(1); }
    for (size_t i = 1; i < saved.size(); ++i)
      if (saved[i].requires_grad()) { inputs.push_back(saved[i]); slot.push_back(int(i) + 1); }

    variable_list result(saved.size() + 1);  // piece, x, params...
    if (!inputs.empty() && out.requires_grad()) {
      auto grads = torch::autograd::grad({out}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                         /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t i = 0; i < grads.size(); ++i) result[slot[i]] = grads[i];
    }
    return result;
  }
};

}  // namespace

at::Tensor checkpointed(const PieceFn& fn, const at::Tensor& x, at::TensorList params) {
  return CheckpointFunction::apply(fn, x, params);
}

at::Tensor run_piece(bool recompute, const PieceFn& fn, const at::Tensor& x, at::TensorList params) {
  if (recompute && at::GradMode::is_enabled()) return checkpointed(fn, x, params);
  return fn(x);
}

}  // namespace wg
