// Dropout's keep-mask (dropout.h): element j of a mask with seed s is
// kept, and scaled by 1 / (1 - p), iff its 32-bit draw is below
// (1 - p) · 2^32. The draws are the halves of splitmix64's outputs started
// at s: element j takes output j / 2, its low 32 bits for even j and its
// high 32 bits for odd j (one 64-bit hash for two elements: the hash's
// 64-bit multiplies are most of a mask's cost). Inline and branch-free,
// in blocks of at most kDropoutBlock elements, so that kernels fusing
// dropout into another elementwise pass (dropout.cpp, gelu_dropout.cpp)
// vectorise it and make the same mask as wg::dropout; an element's factor
// depends only on (s, j), not on the blocks. No LibTorch in this header;
// private to src/model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace wg {

constexpr int64_t kDropoutBlock = 512;  // elements per dropout_factors call, at most

inline uint64_t dropout_draw(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The 32-bit threshold of keeping with probability 1 - p, p in (0, 1).
inline uint32_t dropout_threshold(double p) {
  return uint32_t(std::min<uint64_t>(uint64_t(std::ldexp(1.0 - p, 32)), 0xFFFFFFFFull));
}

// The 32-bit draws of elements [first, first + n), n <= kDropoutBlock,
// into draws[skip, skip + n); returns skip (first's parity).
inline __attribute__((always_inline)) int64_t dropout_draws(uint64_t seed, int64_t first, int64_t n, uint32_t* draws) {
  const int64_t skip = first & 1, pairs = (skip + n + 1) / 2;
  const uint64_t output = uint64_t(first) / 2;  // the output of element first - skip
  uint32_t* __restrict halves = draws;
  for (int64_t i = 0; i < pairs; ++i) {
    const uint64_t z = dropout_draw(seed, output + uint64_t(i));
    halves[2 * i] = uint32_t(z);
    halves[2 * i + 1] = uint32_t(z >> 32);
  }
  return skip;
}

// The factors of elements [first, first + n), n <= kDropoutBlock, into
// f: scale (1 / (1 - p)) where kept, else 0. Two loops that each
// vectorise: the 64-bit hashes into their halves, then the comparisons.
template <typename T>
inline __attribute__((always_inline)) void dropout_factors(uint64_t seed, int64_t first, int64_t n, uint32_t threshold,
                                                           T scale, T* f) {
  uint32_t draws[kDropoutBlock + 2];
  const int64_t skip = dropout_draws(seed, first, n, draws);
  T* __restrict out = f;
  for (int64_t i = 0; i < n; ++i) out[i] = draws[skip + i] < threshold ? scale : T(0);
}

// The same elements' keep bytes into k: 1 where kept, else 0.
inline __attribute__((always_inline)) void dropout_keeps(uint64_t seed, int64_t first, int64_t n, uint32_t threshold,
                                                         uint8_t* k) {
  uint32_t draws[kDropoutBlock + 2];
  const int64_t skip = dropout_draws(seed, first, n, draws);
  uint8_t* __restrict out = k;
  for (int64_t i = 0; i < n; ++i) out[i] = draws[skip + i] < threshold ? 1 : 0;
}

}  // namespace wg
