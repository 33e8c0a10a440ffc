// Dropout's keep-mask, element by element (dropout.h): element j of a mask
// with seed s is kept, and scaled by 1 / (1 - p), iff the top 32 bits of
// the j-th output of splitmix64 started at s are below (1 - p) · 2^32.
// Inline and branch-free, so that kernels fusing dropout into another
// elementwise pass (dropout.cpp, gelu_dropout.cpp) vectorise it and make
// the same mask as wg::dropout. No LibTorch in this header; private to
// src/model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace wg {

inline uint64_t dropout_draw(uint64_t seed, uint64_t j) {
  uint64_t z = seed + (j + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The 32-bit threshold of keeping with probability 1 - p, p in (0, 1).
inline uint32_t dropout_threshold(double p) {
  return uint32_t(std::min<uint64_t>(uint64_t(std::ldexp(1.0 - p, 32)), 0xFFFFFFFFull));
}

// Element j's factor: scale (1 / (1 - p)) where kept, else 0.
template <typename T>
inline __attribute__((always_inline)) T dropout_keep(uint64_t seed, int64_t j, uint32_t threshold, T scale) {
  return uint32_t(dropout_draw(seed, uint64_t(j)) >> 32) < threshold ? scale : T(0);
}

}  // namespace wg
