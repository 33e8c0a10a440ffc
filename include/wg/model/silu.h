// SiLU (x · sigmoid(x), torch.nn.SiLU()) in one vectorised pass forward
// and one backward, for AdaLayerNorm's embedding (src/model/norms.cpp):
// Debian's LibTorch runs torch::silu and silu_backward without AVX2, at
// about 1 ns an element a thread.
//
// Forward: h = x / (1 + e^-x); backward: dx = dh · s · (1 + x · (1 - s)),
// s = 1 / (1 + e^-x), ATen's formulas; float's exp is this project's
// Cephes exp (src/model/vector_math.h, within 2 ulp of std::exp), so the
// values are within a few ulp of ATen's; double's is std::exp. Backward
// keeps x, as SiluBackward0 does. Off the CPU, and for dtypes other than
// float32/float64, it is torch::silu.
#pragma once

#include <torch/torch.h>

namespace wg {

// silu(x), differentiable.
torch::Tensor silu(const torch::Tensor& x);

// Without autograd, for kernels with their own backward (norms.cpp): silu(x)
// for x contiguous float32/float64 on the CPU; and its vjp for the output's
// gradient dh, written into out (which may be dh itself; all contiguous, of
// x's size and dtype) and returned.
torch::Tensor silu_forward(const torch::Tensor& x);
torch::Tensor silu_backward(const torch::Tensor& dh, const torch::Tensor& x, torch::Tensor out);

// Whether the functions above run here (else: torch::silu).
bool silu_runs_on(const torch::Tensor& x);

}  // namespace wg
