// Made-up costs for the planner's tests (test_cost_model.cpp,
// test_memory_planner.cpp): piece keys, whole plans of one mode, and random
// costs with or without lean pieces.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "wg/plan/cost_model.h"
#include "wg/plan/recompute_plan.h"

namespace wg::testing {

constexpr PieceMode K = PieceMode::Keep, L = PieceMode::Lean, R = PieceMode::Recompute;

// A piece of its own section, for costs made up in a test.
inline PieceKey key(const std::string& name) { return PieceKey::io(name, "", PieceKind::Input); }

inline PlanModes every(int n, PieceMode mode) { return PlanModes(size_t(n), mode); }

// With `lean`, two pieces in three can run lean, keeping between their
// output and all they keep, at a made-up cost.
inline CostModel random_costs(uint32_t seed, int n, bool lean = false) {
  std::mt19937 rng(seed);
  CostModel c;
  c.base_bytes = 1000000;
  int64_t all = 0;
  for (int i = 0; i < n; ++i) {
    PieceCost p;
    p.key = key("p" + std::to_string(i));
    p.output_bytes = 1000 + rng() % 20000;
    p.retained_bytes = p.output_bytes + rng() % 200000;
    p.forward_seconds = 1e-4 * (1 + rng() % 100);
    p.gradient_bytes = rng() % 50000;
    if (lean && i % 3 != 2) {
      p.lean_bytes = p.output_bytes + int64_t(rng() % uint32_t(p.retained_bytes - p.output_bytes + 1));
      p.lean_share = 0.01 * double(rng() % 30);
    }
    all += p.retained_bytes;
    c.pieces.push_back(p);
  }
  c.activations_none_bytes = all + 50000;  // some transient
  c.calibrate();
  if (lean) c.lean_seconds_per_byte = 1e-9 * double(rng() % 100);
  return c;
}

}  // namespace wg::testing
