// The per-channel read-out product on rows in place (see header). Compiled
// with OpenMP (CMakeLists.txt): at::parallel_for runs serially without.
#include "wg/model/grouped_rows.h"

#include "wg/model/lane_sum.h"

#include <ATen/Parallel.h>

#include <algorithm>

namespace wg {
namespace {

// Rows (or groups) per task: about 64 K input values.
int64_t grain(int64_t per_task_values) {
  return std::max<int64_t>(1, (int64_t(64) << 10) / std::max<int64_t>(1, per_task_values));
}

}  // namespace

template <typename T>
void grouped_rows_forward(const T* x, const T* w, const T* b, int64_t n, int64_t groups, int64_t in, int64_t out,
                          T* y) {
  at::parallel_for(0, n, grain(groups * in), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        const T* xi = x + (r * groups + g) * in;
        T* yi = y + (r * groups + g) * out;
        for (int64_t o = 0; o < out; ++o) {
          const T* wo = w + (g * out + o) * in;
          const T dot = lane_sum<T>(in, [&](int64_t i) { return xi[i] * wo[i]; });
          yi[o] = b ? dot + b[g * out + o] : dot;
        }
      }
  });
}

template <typename T>
void grouped_rows_input_grad(const T* dy, const T* w, int64_t n, int64_t groups, int64_t in, int64_t out, T* dx) {
  at::parallel_for(0, n, grain(groups * in), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        const T* di = dy + (r * groups + g) * out;
        T* __restrict xi = dx + (r * groups + g) * in;
        const T* __restrict w0 = w + g * out * in;
        for (int64_t i = 0; i < in; ++i) xi[i] = di[0] * w0[i];
        for (int64_t o = 1; o < out; ++o) {
          const T* __restrict wo = w + (g * out + o) * in;
          const T d = di[o];
          for (int64_t i = 0; i < in; ++i) xi[i] += d * wo[i];
        }
      }
  });
}

template <typename T>
void grouped_rows_weight_grad(const T* dy, const T* x, int64_t n, int64_t groups, int64_t in, int64_t out, T* dw,
                              T* db) {
  at::parallel_for(0, groups, grain(n * in), [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      T* __restrict wg = dw + g * out * in;
      std::fill(wg, wg + out * in, T(0));
      if (db) std::fill(db + g * out, db + (g + 1) * out, T(0));
      for (int64_t r = 0; r < n; ++r) {
        const T* __restrict xi = x + (r * groups + g) * in;
        const T* di = dy + (r * groups + g) * out;
        for (int64_t o = 0; o < out; ++o) {
          T* __restrict wo = wg + o * in;
          const T d = di[o];
          for (int64_t i = 0; i < in; ++i) wo[i] += d * xi[i];
          if (db) db[g * out + o] += d;
        }
      }
    }
  });
}

template void grouped_rows_forward<float>(const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                          float*);
template void grouped_rows_forward<double>(const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                           int64_t, double*);
template void grouped_rows_input_grad<float>(const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*);
template void grouped_rows_input_grad<double>(const double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                              double*);
template void grouped_rows_weight_grad<float>(const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*,
                                              float*);
template void grouped_rows_weight_grad<double>(const double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                               double*, double*);

}  // namespace wg
