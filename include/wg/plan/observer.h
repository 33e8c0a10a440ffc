// What a section reports about each piece as its forward runs: the cost
// profiler (cost_profile.h) measures time and memory between before() and
// after(). Not called inside a recomputation in backward. No LibTorch: the
// output is described by its shape and element size.
#pragma once

#include <cstdint>
#include <vector>

#include "wg/plan/piece_key.h"

namespace wg {

struct PieceOutput {
  std::vector<int64_t> sizes;
  int64_t element_size = 0;
  int64_t gradient_bytes = 0;  // its parameters' gradients, which its backward leaves for the optimizer
  int64_t bytes() const {
    int64_t n = element_size;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

class PieceObserver {
 public:
  virtual ~PieceObserver() = default;
  virtual void before(const PieceKey& key) = 0;
  virtual void after(const PieceKey& key, const PieceOutput& output) = 0;
};

}  // namespace wg
