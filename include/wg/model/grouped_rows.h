// The embed's per-channel read-out product on rows as they lie: x [N, G,
// in] row-major, group g of each row through its own weight w[g] [out,
// in] (grouped_linear, lean_ops.h), for the few outputs a channel has (3
// at cpu_wide). A batched product over the groups reads each group's rows
// G·in apart and runs G products N x in x out, too narrow for BLAS's
// kernels (0.5-20 GFLOP/s at cpu_wide), and its backward copies the
// input's gradient back from the groups' order. Here every pass reads and
// writes the rows in place, in one sweep: the forward and the input's
// gradient over rows, the weights' gradient over groups. Each sum runs in
// a fixed order (dot products in lane_sum's 8 lanes, the weight gradient
// over n in order), so the results do not depend on the thread count. No
// LibTorch in this header.
#pragma once

#include <cstdint>

namespace wg {

// y[n, g, o] = Σ_i x[n, g, i] · w[g, o, i] + b[g, o] (b may be null).
template <typename T>
void grouped_rows_forward(const T* x, const T* w, const T* b, int64_t n, int64_t groups, int64_t in, int64_t out, T* y);

// dx[n, g, i] = Σ_o dy[n, g, o] · w[g, o, i].
template <typename T>
void grouped_rows_input_grad(const T* dy, const T* w, int64_t n, int64_t groups, int64_t in, int64_t out, T* dx);

// dw[g, o, i] = Σ_n dy[n, g, o] · x[n, g, i]; db[g, o] = Σ_n dy[n, g, o]
// (db may be null).
template <typename T>
void grouped_rows_weight_grad(const T* dy, const T* x, int64_t n, int64_t groups, int64_t in, int64_t out, T* dw,
                              T* db);

}  // namespace wg
