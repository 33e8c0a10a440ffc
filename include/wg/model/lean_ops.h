// Matrix products that can keep only their inputs (Saving::Lean): the
// building block of the `selective` recomputation mode.
//
// fused_linear computes pre(x) · cat(W_i)ᵀ + cat(b_i): one product for
// several weights that read the same input (q, k and v; k and v), while
// the weights stay separate parameters with their own state_dict names.
// `pre` is what runs between the kept input and the product (a norm, GELU
// and dropout): with Saving::All it runs under autograd and its output is
// kept, as a plain module would; with Saving::Lean only x is kept and
// backward runs pre(x) again (with the random generators as at the first
// run, so dropout draws the same mask). Either way backward takes the
// product's gradients with the same two products, so the gradients of
// All and Lean are bit-identical. (A recomputation's second run,
// Saving::Rerun, uses the lean form too where a piece's last product has
// a joint pre: output_linear.)
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "wg/model/saving.h"

namespace wg {

// pre run again without a graph, and its vector-Jacobian product: dh ->
// the gradients of x and of each of pre's params, in that order. dh is
// the vjp's own (nothing else reads it): it may write its result there.
// The caller drops h before it calls vjp, so what vjp needs of the run
// it holds itself.
struct PreludeRun {
  torch::Tensor h;
  std::function<std::vector<torch::Tensor>(torch::Tensor dh)> vjp;
};

struct Prelude {
  std::function<torch::Tensor(const torch::Tensor&)> fn;  // empty: the identity
  std::vector<torch::Tensor> params;                      // tensors fn reads that need gradients
  bool draws_random = false;                              // fn draws random numbers (dropout in training)
  // Optional: fn with its own backward, which a lean backward runs instead
  // of fn under autograd (no graph, no reentrant autograd::grad), with the
  // random generators as at the first run when it draws. It calls the
  // kernels autograd would, so the gradients stay bit-identical (LeanOps.*).
  std::function<PreludeRun(const torch::Tensor&)> rerun;
  // Optional, with rerun: fn that also gives what a rerun may take from
  // this run instead of computing it again (a layer norm's row statistics,
  // layer_norm_again.h), and the rerun that takes it. A lean product keeps
  // what keeping gave until its backward, which calls rerun_kept with it
  // (empty where keeping left nothing, as rerun would run).
  std::function<torch::Tensor(const torch::Tensor& x, std::vector<torch::Tensor>& kept)> keeping;
  std::function<PreludeRun(const torch::Tensor& x, const std::vector<torch::Tensor>& kept)> rerun_kept;
  // Optional, instead of rerun, where pre's run and its vjp fuse (the
  // attention core on the CPU kernel, where it runs again in a lean
  // backward, lean_reruns_core in saving.h, or in a recomputation's
  // backward, output_linear): (x, dh) -> h as the first run gave it, and
  // the gradients of x and of each of params. Such a backward takes dh
  // from the product first; h and dh are held at once.
  struct JointRun {
    torch::Tensor h;
    std::vector<torch::Tensor> grads;
  };
  std::function<JointRun(const torch::Tensor& x, const torch::Tensor& dh)> joint;
  // Optional, lean only: the product does not keep x either; backward makes
  // it again with this, from what the closure holds, with the bits x had
  // (a cheap, deterministic function: the embed's input, a narrow product
  // and an add, piece.h's MakeAgain). x still gets its gradient.
  std::function<torch::Tensor()> input_again;
};

// Preludes of the model's layers that have a rerun (preludes.cpp):
// LN_eps(x) over the last dimension, affine when weight and bias are given
// (then params = {weight, bias});
Prelude layer_norm_prelude(double eps, const torch::Tensor& weight = {}, const torch::Tensor& bias = {});
// AdaLayerNorm's LN_eps(x) · (1 + scale) + shift, scale and shift computed
// before (params: those of them that need gradients);
Prelude modulated_norm_prelude(double eps, const torch::Tensor& scale, const torch::Tensor& shift);
// LN_eps(x) · weight + bias with weight and bias broadcast over x (the
// per-channel read-out norms stacked: [G, d] against x [..., G, d]);
Prelude channel_norm_prelude(double eps, const torch::Tensor& weight, const torch::Tensor& bias);
// the MLP's dropout(GELU(x)) (wg::dropout, dropout.h).
Prelude gelu_dropout_prelude(double dropout, bool training);

// x [..., in] -> [..., sum of the weights' rows]; weights [out_i, in];
// biases empty or one [out_i] per weight.
torch::Tensor fused_linear(const torch::Tensor& x, const Prelude& pre, const std::vector<torch::Tensor>& weights,
                           const std::vector<torch::Tensor>& biases, Saving saving);

// A piece's last product (attention's output projection, the MLP's second
// layer): fused_linear, except under Saving::Rerun, where the product is
// not computed and its output is zeros, with the gradients of x, pre's
// tensors, the weights and biases as fused_linear's. Only where nothing
// but a residual sum, or the piece's output itself, reads the output: a
// recomputation's backward then needs none of its values. Under
// Saving::Rerun a pre with a joint run (the attention core) does not run
// in forward either: backward runs it as with Saving::Lean, forward and
// backward in one pass. Nothing after it in the piece may draw random
// numbers (pre's draws are made in backward, from the states it would
// have drawn them from).
torch::Tensor output_linear(const torch::Tensor& x, const Prelude& pre, const std::vector<torch::Tensor>& weights,
                            const std::vector<torch::Tensor>& biases, Saving saving);

// x [..., G, in] -> [..., G, out]: group g (x[..., g, :]) through weights[g]
// [out, in] and biases[g] [out], as G separate products would (the embed's
// per-channel read-out), in one pass whose backward writes one gradient
// for x instead of G zero-filled ones: on the CPU with at most 32 outputs
// a group over the rows in place (grouped_rows.h), else one batched
// product over the groups; pre and saving as above.
torch::Tensor grouped_linear(const torch::Tensor& x, const Prelude& pre, const std::vector<torch::Tensor>& weights,
                             const std::vector<torch::Tensor>& biases, Saving saving);

// Puts parameters that fused_linear takes together (q, k and v; k and v)
// one after another in one new storage, in this order, with their values
// (each keeps its name, shape and place in the module; set_data). While
// they lie so, fused_linear reads them as one operand where they are;
// otherwise (a device or dtype change made each its own storage again)
// it concatenates them, with the same result. Same dtype, device and
// trailing sizes.
void place_adjacent(const std::vector<torch::Tensor>& params);

// Whether fused_linear would read these weights in place (no copy).
bool lie_adjacent(const std::vector<torch::Tensor>& weights);

}  // namespace wg
