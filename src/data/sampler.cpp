// Deterministic sharded sampling (see header).
#include "wg/data/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "wg/data/seeds.h"

namespace wg {

Sampler::Sampler(uint64_t seed, int64_t samples_per_mini_epoch, int batch_per_rank, int world)
    : seed_(seed), samples_(samples_per_mini_epoch), batch_(batch_per_rank), world_(world) {
  if (batch_ < 1 || world_ < 1) throw std::invalid_argument("batch and world size must be >= 1");
  const int64_t global = int64_t(batch_) * world_;
  steps_per_epoch_ = samples_ / global;
  if (steps_per_epoch_ < 1)
    throw std::invalid_argument("samples_per_mini_epoch (" + std::to_string(samples_) +
                                ") is smaller than one global batch (batch_size_per_gpu " +
                                std::to_string(batch_) + " x " + std::to_string(world_) +
                                " ranks = " + std::to_string(global) + ")");
}

std::vector<int64_t> Sampler::sample_ids(int64_t epoch, int64_t step_in_epoch, int rank) const {
  if (step_in_epoch < 0 || step_in_epoch >= steps_per_epoch_ || rank < 0 || rank >= world_)
    throw std::out_of_range("sampler: step or rank out of range");
  std::vector<int64_t> perm(static_cast<size_t>(samples_));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  std::mt19937_64 rng(mix_seed(seed_, 0x5A3D1E00ull + static_cast<uint64_t>(epoch)));
  // Fisher-Yates with our own index draw: std::shuffle's use of the engine is
  // implementation-defined, this is the same on every platform.
  for (int64_t i = samples_ - 1; i > 0; --i) std::swap(perm[i], perm[rng() % uint64_t(i + 1)]);
  std::vector<int64_t> ids;
  const int64_t first = step_in_epoch * batch_ * world_ + int64_t(rank) * batch_;
  for (int i = 0; i < batch_; ++i) ids.push_back(epoch * samples_ + perm[first + i]);
  return ids;
}

}  // namespace wg
