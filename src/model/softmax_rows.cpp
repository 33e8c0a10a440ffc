// Row-wise softmax steps (see header).
#include "wg/model/softmax_rows.h"

#include <cmath>
#include <cstring>

#include "vector_math.h"
#include "wg/model/lane_sum.h"
#include "wg/util/vector_isa.h"

namespace wg {
namespace {

// The largest of row[0, n), n >= 1, in lanes of 32-byte vectors
// (GCC's vector extension: a compare and a blend per vector on every
// target, where an array of lanes stays scalar); a NaN is passed over, and
// then makes every exp NaN.
template <typename T>
inline __attribute__((always_inline)) T lane_max(const T* row, int64_t n) {
  constexpr int kLanes = int(32 / sizeof(T));
  typedef T Lanes __attribute__((vector_size(32)));
  const Lanes first = Lanes{} + row[0];  // row[0] in every lane
  Lanes acc[4] = {first, first, first, first};  // four vectors in flight (a max is exact in any order)
  int64_t j = 0;
  for (; j + 4 * kLanes <= n; j += 4 * kLanes)
    for (int v = 0; v < 4; ++v) {
      Lanes x;
      std::memcpy(&x, row + j + v * kLanes, sizeof x);
      acc[v] = x > acc[v] ? x : acc[v];
    }
  for (; j + kLanes <= n; j += kLanes) {
    Lanes x;
    std::memcpy(&x, row + j, sizeof x);
    acc[0] = x > acc[0] ? x : acc[0];
  }
  for (int v = 1; v < 4; ++v) acc[0] = acc[v] > acc[0] ? acc[v] : acc[0];
  T top = acc[0][0];
  for (int l = 1; l < kLanes; ++l) top = acc[0][l] > top ? acc[0][l] : top;
  for (; j < n; ++j) top = row[j] > top ? row[j] : top;
  return top;
}

// Each row's maximum (or lse) is taken from it row by row, then the whole
// tile goes through the exp at once: a row's 71 or 79 scores would leave
// a scalar tail of exps in every row. The sums go through lane_sum (fixed
// lanes): a row's result does not depend on where it runs.
template <bool Fma, typename T>
inline __attribute__((always_inline)) void exp_all(T* x, int64_t n) {
  T* __restrict y = x;
  for (int64_t i = 0; i < n; ++i) y[i] = vmath::exp_of<Fma>(y[i]);
}

template <typename T>
inline __attribute__((always_inline)) void minus_row(T* row, int64_t cols, T m) {
  T* __restrict y = row;
  for (int64_t c = 0; c < cols; ++c) y[c] -= m;
}

template <bool Fma, typename T>
inline __attribute__((always_inline)) void softmax_rows_impl(T* s, int64_t rows, int64_t cols, T* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = lane_max(s + r * cols, cols);
    minus_row(s + r * cols, cols, lse[r]);
  }
  exp_all<Fma>(s, rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    T* __restrict row = s + r * cols;
    const T sum = lane_sum<T>(cols, [&](int64_t c) { return row[c]; });
    lse[r] += std::log(sum);
    const T inv = T(1) / sum;
    for (int64_t c = 0; c < cols; ++c) row[c] *= inv;
  }
}

template <bool Fma, typename T>
inline __attribute__((always_inline)) void exp_rows_minus_impl(T* s, int64_t rows, int64_t cols, const T* lse) {
  for (int64_t r = 0; r < rows; ++r) minus_row(s + r * cols, cols, lse[r]);
  exp_all<Fma>(s, rows * cols);
}

template <typename T>
inline __attribute__((always_inline)) void softmax_grad_rows_impl(T* g, const T* p, int64_t rows, int64_t cols,
                                                                  const T* dot) {
  for (int64_t r = 0; r < rows; ++r) {
    T* __restrict gr = g + r * cols;
    const T* __restrict pr = p + r * cols;
    const T d = dot[r];
    for (int64_t c = 0; c < cols; ++c) gr[c] = (gr[c] - d) * pr[c];
  }
}

template <bool Fma>
inline __attribute__((always_inline)) void exp_float_impl(const float* x, float* y, int64_t n) {
  const float* __restrict a = x;
  float* __restrict b = y;
  for (int64_t i = 0; i < n; ++i) b[i] = vmath::cephes_exp<Fma>(a[i]);
}

// Each step compiled three times; the best the CPU has is chosen once.
#define WG_ROW_STEPS(suffix, fma, attributes)                                                                      \
  template <typename T>                                                                                       \
  attributes void softmax_##suffix(T* s, int64_t rows, int64_t cols, T* lse) {                                \
    softmax_rows_impl<fma>(s, rows, cols, lse);                                                                    \
  }                                                                                                           \
  template <typename T>                                                                                       \
  attributes void exp_minus_##suffix(T* s, int64_t rows, int64_t cols, const T* lse) {                        \
    exp_rows_minus_impl<fma>(s, rows, cols, lse);                                                                  \
  }                                                                                                           \
  template <typename T>                                                                                       \
  attributes void grad_##suffix(T* g, const T* p, int64_t rows, int64_t cols, const T* dot) {                 \
    softmax_grad_rows_impl(g, p, rows, cols, dot);                                                            \
  }                                                                                                           \
  attributes void exp_float_##suffix(const float* x, float* y, int64_t n) { exp_float_impl<fma>(x, y, n); }
WG_ROW_STEPS(avx512, true, __attribute__((target("avx512f,avx512dq"))))
WG_ROW_STEPS(avx2, true, __attribute__((target("avx2,fma"))))
WG_ROW_STEPS(base, false, )
#undef WG_ROW_STEPS

}  // namespace

template <typename T>
void softmax_rows(T* s, int64_t rows, int64_t cols, T* lse) {
  by_vector_isa(softmax_avx512<T>, softmax_avx2<T>, softmax_base<T>)(s, rows, cols, lse);
}

template <typename T>
void exp_rows_minus(T* s, int64_t rows, int64_t cols, const T* lse) {
  by_vector_isa(exp_minus_avx512<T>, exp_minus_avx2<T>, exp_minus_base<T>)(s, rows, cols, lse);
}

template <typename T>
void softmax_grad_rows(T* g, const T* p, int64_t rows, int64_t cols, const T* dot) {
  by_vector_isa(grad_avx512<T>, grad_avx2<T>, grad_base<T>)(g, p, rows, cols, dot);
}

void exp_float(const float* x, float* y, int64_t n) {
  by_vector_isa(exp_float_avx512, exp_float_avx2, exp_float_base)(x, y, n);
}

template void softmax_rows<float>(float*, int64_t, int64_t, float*);
template void softmax_rows<double>(double*, int64_t, int64_t, double*);
template void exp_rows_minus<float>(float*, int64_t, int64_t, const float*);
template void exp_rows_minus<double>(double*, int64_t, int64_t, const double*);
template void softmax_grad_rows<float>(float*, const float*, int64_t, int64_t, const float*);
template void softmax_grad_rows<double>(double*, const double*, int64_t, int64_t, const double*);

}  // namespace wg
