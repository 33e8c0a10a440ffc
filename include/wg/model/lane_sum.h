// Σ_j f(j) for j < n in 8 fixed lanes, the lanes added pairwise at the
// end: vectorisable without reassociating (each lane's order is fixed),
// so a sum has the same bits wherever it runs (any thread count, any
// split of the rows). Used by the q/k norm (head_norm.cpp) and the
// attention kernel's per-row sums (attention_kernel.cpp).
#pragma once

#include <cstdint>

namespace wg {

constexpr int kSumLanes = 8;

template <typename T, typename F>
inline T lane_sum(int64_t n, const F& f) {
  T acc[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) acc[l] += f(j + l);
  for (int l = 0; j < n; ++j, ++l) acc[l] += f(j);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace wg
