// The per-head layer norm of q and k (see header). Compiled with OpenMP
// (CMakeLists.txt): at::parallel_for runs serially in a file without it.
#include "wg/model/head_norm.h"

#include "wg/model/lane_sum.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

namespace wg {
namespace {

// Rows per task: about 16 K values.
int64_t grain(int64_t heads, int64_t dh) { return std::max<int64_t>(1, (int64_t(16) << 10) / std::max<int64_t>(1, heads * dh)); }

// The attention kernel norms one head at a time, out of the fused
// projection's rows (3 KiB apart in the embed's qkv): a stride the
// hardware prefetchers do not follow, so each row's slice was a cache miss
// waited for in turn. The slice kAhead rows on is fetched while this one
// is normed (a hint: no value changes). Measured 2026-12-05 on the cores
// with their q/k norm (bench_attention_core, 2 threads, 3 alternated
// runs): forward + backward 40.5-49.6 ms -> 37.7-39.8 at the embed's
// shape, 57.2-58.5 -> 52.7-54.1 at ae_global's.
constexpr int64_t kAhead = 4;

template <typename T>
inline void prefetch_slice(const T* p, int64_t n, bool write) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t b = 0; b < n * int64_t(sizeof(T)); b += 64)
    write ? __builtin_prefetch(c + b, 1) : __builtin_prefetch(c + b);
}

}  // namespace

template <typename T>
void head_norm_forward(const T* x, int64_t ld, int64_t rows, int64_t heads, int64_t dh, double eps, T* y, T* rstd) {
  const T inv_n = T(1) / T(dh), e = T(eps);
  at::parallel_for(0, rows, grain(heads, dh), [&](int64_t begin, int64_t end) {
    // kBatch (row, head) slices at a time, in three passes: the moments,
    // then the square roots and divisions, then the normed rows. Each
    // slice's 1/sqrt waits on its variance and its row on that, which
    // at the narrow heads of small models (dh 8) left the core stalled on
    // one slice at a time; in passes the slices' square roots overlap.
    // The same operations on the same values: the bits do not change.
    constexpr int64_t kBatch = 32;
    T mean[kBatch], var[kBatch];
    const T* src[kBatch];
    int64_t r = begin, h = 0;  // the next slice (r, h), number r · heads + h
    for (int64_t s0 = begin * heads, last = end * heads; s0 < last; s0 += kBatch) {
      const int64_t n = std::min(kBatch, last - s0);
      for (int64_t b = 0; b < n; ++b) {
        const T* xi = src[b] = x + r * ld + h * dh;
        if (h == 0 && r + kAhead < end) prefetch_slice(xi + kAhead * ld, heads * dh, false);
        const T m = lane_sum<T>(dh, [&](int64_t j) { return xi[j]; }) * inv_n;
        mean[b] = m;
        var[b] = lane_sum<T>(dh, [&](int64_t j) { return (xi[j] - m) * (xi[j] - m); }) * inv_n;
        if (++h == heads) h = 0, ++r;
      }
      for (int64_t b = 0; b < n; ++b) rstd[s0 + b] = T(1) / std::sqrt(var[b] + e);
      for (int64_t b = 0; b < n; ++b) {
        const T* xi = src[b];
        const T m = mean[b], rs = rstd[s0 + b];
        T* yi = y + (s0 + b) * dh;
        for (int64_t j = 0; j < dh; ++j) yi[j] = (xi[j] - m) * rs;
      }
    }
  });
}

template <typename T>
void head_norm_backward(const T* dy, int64_t ld_dy, const T* y, const T* rstd, int64_t rows, int64_t heads, int64_t dh,
                        T* dx, int64_t ld) {
  const T inv_n = T(1) / T(dh);
  at::parallel_for(0, rows, grain(heads, dh), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const T *dyi = dy + r * ld_dy + h * dh, *yi = y + (r * heads + h) * dh;
        T* dxi = dx + r * ld + h * dh;  // may be dyi: both sums are taken before any write
        if (r + kAhead < end) prefetch_slice(dxi + kAhead * ld, dh, true);
        const T a = lane_sum<T>(dh, [&](int64_t j) { return dyi[j]; }) * inv_n;
        const T b = lane_sum<T>(dh, [&](int64_t j) { return dyi[j] * yi[j]; }) * inv_n;
        const T rs = rstd[r * heads + h];
        for (int64_t j = 0; j < dh; ++j) dxi[j] = rs * (dyi[j] - a - yi[j] * b);
      }
  });
}

template void head_norm_forward<float>(const float*, int64_t, int64_t, int64_t, int64_t, double, float*, float*);
template void head_norm_forward<double>(const double*, int64_t, int64_t, int64_t, int64_t, double, double*, double*);
template void head_norm_backward<float>(const float*, int64_t, const float*, const float*, int64_t, int64_t, int64_t,
                                        float*, int64_t);
template void head_norm_backward<double>(const double*, int64_t, const double*, const double*, int64_t, int64_t, int64_t,
                                         double*, int64_t);

}  // namespace wg
