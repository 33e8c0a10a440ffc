// GELU (the exact, erf form: torch.nn.GELU()) followed by dropout, as the
// MLPs run them, in one elementwise pass forward and one backward, where
// LibTorch runs two each (gelu, the dropout mask; the mask, gelu_backward).
//
// The same values as torch::gelu then wg::dropout: the same seed drawn at
// the same point from the CPU generator, so the same mask
// (src/model/dropout_draw.h); float's erf is Abramowitz and Stegun 7.1.26
// (absolute error under 1.5e-7), the formula ATen's own vectorised float GELU uses, with this project's
// exp (src/model/vector_math.h); double's is std::erf. Backward keeps x
// (as GeluBackward0 does) and the seed, no mask. Off the CPU, and for
// dtypes other than float32/float64, it is torch::gelu then wg::dropout.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace wg {

// dropout(gelu(x), p, training), differentiable.
torch::Tensor gelu_dropout(const torch::Tensor& x, double p, bool training);

// Without autograd, for kernels with their own backward (preludes.cpp):
// gelu(x) · mask(seed, p) (p = 0: no mask), x contiguous float32/float64
// on the CPU; and its vjp for the output's gradient dh, written into out
// (which may be dh itself; all contiguous, of x's size and dtype) and
// returned.
torch::Tensor gelu_dropout_forward(const torch::Tensor& x, uint64_t seed, double p);
torch::Tensor gelu_dropout_backward(const torch::Tensor& dh, const torch::Tensor& x, uint64_t seed, double p,
                                    torch::Tensor out);

// Whether the functions above run here (else: torch::gelu, wg::dropout).
bool gelu_dropout_runs_on(const torch::Tensor& x);

}  // namespace wg
