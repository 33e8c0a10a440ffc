// The attention kernel's row-wise softmax steps over a tile of scores
// ([rows, cols] contiguous, each row a query's scores against its keys),
// each one pass per row while the row is in the core's cache, in place of
// the five to seven ATen passes over the whole tile they replace (amax,
// sub_, exp_, sum, mul_ in forward; sub_, exp_ and sub_, mul_ in backward).
// No LibTorch in this header.
//
// float's exp is Cephes' expf (src/model/vector_math.h: range reduction
// by ln 2 in two parts, a degree-5 polynomial, 2^n from the exponent
// bits), within 2 ulp of std::exp for arguments in [-87, 88]
// (tests/model/test_softmax_rows.cpp); below about -87.34 it gives 0
// where std::exp gives a subnormal or 0 (so a masked score, -inf, gets
// probability 0), above 88 about 1.65e38 (the steps only take s - max <=
// 0), and NaN stays NaN (a row of only -inf is NaN, as in ATen). It is
// branch-free, so its loops vectorise; they are compiled for AVX-512, AVX2
// and the baseline, and the best the CPU has is chosen
// (wg/util/vector_isa.h). A row's results do not depend on the other rows
// given with it. double uses std::exp.
//
// Every row has at least one column (cols >= 1).
#pragma once

#include <cstdint>

namespace wg {

// Row r: p = exp(s - max_r) / Σ exp(s - max_r), in place; lse[r] = max_r + log Σ.
template <typename T>
void softmax_rows(T* s, int64_t rows, int64_t cols, T* lse);

// Row r: p = exp(s - lse[r]), in place (the probabilities again from the scores).
template <typename T>
void exp_rows_minus(T* s, int64_t rows, int64_t cols, const T* lse);

// Row r: g = (g - dot[r]) · p, in place (the scores' gradient from the
// probabilities' and the rows' Σ dP · P).
template <typename T>
void softmax_grad_rows(T* g, const T* p, int64_t rows, int64_t cols, const T* dot);

// The file's float exp, elementwise: for tests.
void exp_float(const float* x, float* y, int64_t n);

}  // namespace wg
