// The upper median of timings (the middle one of an odd count, the upper
// of the two middle ones of an even count; 0 for none), shared by the
// benchmarks that report it. No LibTorch here (bench_tokenize has none).
#pragma once

#include <algorithm>
#include <vector>

namespace wg::bench {

inline double upper_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace wg::bench
