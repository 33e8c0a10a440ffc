// A layer norm's output made again from its first run's row statistics
// (mean and rstd, which native_layer_norm returns and its backward reads),
// for the lean preludes' reruns (preludes.cpp): one elementwise pass where
// native_layer_norm makes both statistics again first, which at the
// model's narrow rows (32 to 128 wide) costs several times the pass.
//
// It computes what ATen's CPU layer norm kernel does with the
// statistics, in the form this LibTorch's kernel uses: 1.13's
// y = x · rstd + (-rstd · mean), or 2.x's y = (x - mean) · rstd (Debian
// 13's 2.6), then y · weight + bias when affine; each multiply-add fused
// where the CPU has them (ATen's AVX2 and AVX-512 kernels are compiled
// with contraction), so that it gives the bits native_layer_norm gave.
// Which form does, if either, is checked once against native_layer_norm
// (layer_norm_again_matches); where neither does, callers run
// native_layer_norm again, and layer_norm_again itself takes the second
// form (no cancellation where x is close to the mean).
#pragma once

#include <torch/torch.h>

namespace wg {

// x [..., d] contiguous float32 on the CPU, mean and rstd with one value a
// row (x's leading dimensions, as native_layer_norm returns them), weight
// and bias [d] or both undefined.
torch::Tensor layer_norm_again(const torch::Tensor& x, const torch::Tensor& mean, const torch::Tensor& rstd,
                               const torch::Tensor& weight = {}, const torch::Tensor& bias = {});

// Whether layer_norm_again gives native_layer_norm's bits here: checked
// once per process, for each form, on rows of several widths (1 to 256),
// affine and not.
bool layer_norm_again_matches();

// Whether layer_norm_again takes x (and would give native_layer_norm's bits).
bool layer_norm_again_runs_on(const torch::Tensor& x);

}  // namespace wg
