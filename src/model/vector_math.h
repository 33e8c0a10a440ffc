// Branch-free float functions whose loops GCC vectorises, for files
// compiled once per vector instruction set (softmax_rows.cpp,
// gelu_dropout.cpp): each file is compiled without contraction
// (-ffp-contract=off) and says where a fused multiply-add is wanted
// (madd<true>), so that a loop's vector body and its scalar tail give the
// same bits. Private to src/model.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace wg::vmath {

// a · b + c: one fused multiply-add where the target has them, else a
// product and a sum; written out, as the file is compiled without
// contraction (-ffp-contract=off), so that a loop's vector body and its
// scalar tail give the same bits.
template <bool Fma>
inline __attribute__((always_inline)) float madd(float a, float b, float c) {
  if constexpr (Fma) return __builtin_fmaf(a, b, c);
  return a * b + c;
}

// Cephes' expf: x = n · ln 2 + r, |r| <= ln 2 / 2 (ln 2 in two parts, so
// that r is exact to float precision), e^r by a degree-5 polynomial, 2^n
// from the exponent bits. x is clamped to [-87.3, 88.0] (n in [-126,
// 127]), through comparisons that leave a NaN as it is; below -87.33654
// (where e^x is subnormal) the result is 0, so e^-inf is 0 as a masked
// score needs, and above 88 it saturates at about 1.65e38 instead of inf.
// A NaN gives NaN (the integer conversion sees 0 in its place, as
// converting a NaN is undefined).
template <bool Fma>
inline __attribute__((always_inline)) float cephes_exp(float x_in) {
  float x = x_in < -87.33654f ? -87.33654f : x_in;
  x = x > 88.0f ? 88.0f : x;
  const float fx = madd<Fma>(x, 1.44269504088896341f, 0.5f);
  const float fx_finite = fx == fx ? fx : 0.0f;
  float n = float(int32_t(fx_finite));  // floor(fx): truncation, less one below zero
  n = n > fx ? n - 1.0f : n;
  const float r = madd<Fma>(n, 2.12194440e-4f, madd<Fma>(n, -0.693359375f, x));
  float y = 1.9875691500e-4f;
  y = madd<Fma>(y, r, 1.3981999507e-3f);
  y = madd<Fma>(y, r, 8.3334519073e-3f);
  y = madd<Fma>(y, r, 4.1665795894e-2f);
  y = madd<Fma>(y, r, 1.6666665459e-1f);
  y = madd<Fma>(y, r, 5.0000001201e-1f);
  y = madd<Fma>(y, r * r, r) + 1.0f;
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return x_in < -87.33654f ? 0.0f : y * two_n;
}

// e^x: Cephes' for float, std::exp for double.
template <bool Fma>
inline __attribute__((always_inline)) float exp_of(float x) {
  return cephes_exp<Fma>(x);
}
template <bool Fma>
inline __attribute__((always_inline)) double exp_of(double x) {
  return std::exp(x);
}

// erf by Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7; as
// ATen's own vectorised float erf computes it): with t = 1 / (1 + p·|x|),
// erf(x) = sign(x) · (1 - t · P(t) · e^(-x²)). erf_abs_as takes |x| and
// e^(-x²) (GELU's backward has the latter already).
template <bool Fma>
inline __attribute__((always_inline)) float erf_abs_as(float a, float e_minus_a2) {
  const float t = 1.0f / madd<Fma>(0.3275911f, a, 1.0f);
  float r = 1.061405429f;
  r = madd<Fma>(r, t, -1.453152027f);
  r = madd<Fma>(r, t, 1.421413741f);
  r = madd<Fma>(r, t, -0.284496736f);
  r = madd<Fma>(r, t, 0.254829592f);
  return 1.0f - r * t * e_minus_a2;
}

// x with the sign of s.
inline __attribute__((always_inline)) float with_sign_of(float x, float s) {
  uint32_t xb, sb;
  std::memcpy(&xb, &x, sizeof xb);
  std::memcpy(&sb, &s, sizeof sb);
  xb = (xb & 0x7FFFFFFFu) | (sb & 0x80000000u);
  float out;
  std::memcpy(&out, &xb, sizeof out);
  return out;
}

inline __attribute__((always_inline)) float abs_of(float x) { return with_sign_of(x, 0.0f); }

template <bool Fma>
inline __attribute__((always_inline)) float erf_as(float x) {
  const float a = abs_of(x);
  return with_sign_of(erf_abs_as<Fma>(a, cephes_exp<Fma>(-(a * a))), x);
}

}  // namespace wg::vmath
