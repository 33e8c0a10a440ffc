// The per-head layer norm of q and k (no affine parameters) as the CPU
// attention kernel takes it: over each head's dh values of packed rows
// that may lie strided in a wider tensor (q, k and v side by side in one
// fused projection), with its backward written into such rows too, so
// neither direction copies q or k out or concatenates gradients.
//
// Per (row, head): mean and variance in two passes (biased variance),
// rstd = 1 / sqrt(var + eps), y = (x - mean) · rstd; backward
// dx = rstd · (dy - mean(dy) - y · mean(dy · y)). Sums run in 8 fixed
// lanes, so results do not depend on the thread count. They equal
// torch::layer_norm's within float rounding (HeadNorm.* tests).
#pragma once

#include <cstdint>

namespace wg {

// x: head h of row r at x + r·ld + h·dh (contiguous dh values); y [rows,
// heads, dh] and rstd [rows, heads] contiguous.
template <typename T>
void head_norm_forward(const T* x, int64_t ld, int64_t rows, int64_t heads, int64_t dh, double eps, T* y, T* rstd);

// dy: head h of row r at dy + r·ld_dy + h·dh; y [rows, heads, dh] and
// rstd [rows, heads] contiguous (from head_norm_forward); dx written at
// dx + r·ld + h·dh. dx may be dy (the same rows, ld == ld_dy): the
// gradient then replaces dy in place, with the same bits.
template <typename T>
void head_norm_backward(const T* dy, int64_t ld_dy, const T* y, const T* rstd, int64_t rows, int64_t heads, int64_t dh,
                        T* dx, int64_t ld);

}  // namespace wg
