// PipelineRng: keyed xoshiro256** (see pipeline_rng.h for the algorithms).
#include "wg/data/pipeline_rng.h"

#include <cmath>
#include <numeric>

namespace wg {

namespace {

uint64_t splitmix64_next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

PipelineRng::PipelineRng(uint64_t seed, uint64_t mini_epoch, uint64_t sample_id, uint64_t stream, RngPurpose purpose,
                         uint64_t index) {
  const uint64_t key[6] = {seed, mini_epoch, sample_id, stream, static_cast<uint64_t>(purpose), index};
  uint64_t h = 0x6a09e667f3bcc909ULL;
  for (uint64_t word : key) {
    uint64_t st = h ^ word;
    h = splitmix64_next(st);
  }
  for (uint64_t& s : s_) s = splitmix64_next(h);
}

uint64_t PipelineRng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double PipelineRng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double PipelineRng::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t PipelineRng::below(uint64_t n) {
  if (n <= 1) return 0;
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

void PipelineRng::shuffle(int64_t* begin, int64_t n) {
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(below(static_cast<uint64_t>(i) + 1));
    std::swap(begin[i], begin[j]);
  }
}

std::vector<int64_t> PipelineRng::permutation(int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  shuffle(p.data(), n);
  return p;
}

std::vector<int64_t> PipelineRng::choice(int64_t n, int64_t k) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = i + static_cast<int64_t>(below(static_cast<uint64_t>(n - i)));
    std::swap(p[i], p[j]);
  }
  p.resize(static_cast<size_t>(k));
  return p;
}

}  // namespace wg
