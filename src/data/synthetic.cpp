// Synthetic travelling-wave fields (see header).
#include "wg/data/synthetic.h"

#include <cmath>
#include <random>

#include "wg/data/batch.h"

namespace wg {

namespace {
constexpr double kPi = 3.14159265358979323846;
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

SyntheticStream::SyntheticStream(const StreamConfig& stream, uint64_t seed)
    : cfg_(stream.synthetic), token_size_(stream.token_size), seed_(mix_seed(seed, hash_name(stream.name))) {
  std::mt19937_64 rng(seed_);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::normal_distribution<double> n01(0.0, 1.0);
  const int K = cfg_.num_waves, C = cfg_.num_channels;
  // Wavelengths of at least 8 cells keep fields smooth on the grid. The first
  // half of the waves stand still (a "climatology", predictable from where a
  // token is); the others travel (predictable from the token's neighbours).
  const int max_kx = std::max(1, cfg_.grid_lon / 8), max_ky = std::max(1, cfg_.grid_lat / 4);
  for (int k = 0; k < K; ++k) {
    Wave w;
    w.kx = 1 + std::floor(u01(rng) * max_kx);
    w.ky = 1 + std::floor(u01(rng) * max_ky);
    w.omega = k < K / 2 ? 0.0 : 0.2 + 0.8 * u01(rng);
    w.phase = 2 * kPi * u01(rng);
    waves_.push_back(w);
  }
  mix_.resize(static_cast<size_t>(C) * K);
  mean_.resize(C);
  stdev_.resize(C);
  scale_.resize(C);
  for (int c = 0; c < C; ++c) {
    double var = cfg_.noise * cfg_.noise;
    for (int k = 0; k < K; ++k) {
      const double a = n01(rng) / std::sqrt(double(K));
      mix_[c * K + k] = a;
      var += 0.5 * a * a;  // E[sin^2] = 1/2 over the uniformly moving phase
    }
    mean_[c] = 10.0 * n01(rng);            // channels differ in offset ...
    scale_[c] = std::exp(1.5 * n01(rng));  // ... and in scale
    stdev_[c] = scale_[c] * std::sqrt(var);
  }
}

void SyntheticStream::sample(int64_t id, std::vector<float>& values, std::vector<float>& centroids) const {
  const int K = cfg_.num_waves, C = cfg_.num_channels, ts = token_size_;
  const int nlat = cfg_.grid_lat, nlon = cfg_.grid_lon;
  std::mt19937_64 rng(mix_seed(seed_, static_cast<uint64_t>(id)));
  std::normal_distribution<double> n01(0.0, 1.0);
  const double t0_hours = double(id) * cfg_.time_step_hours;
  std::vector<double> s(K);
  for (int la = 0; la < nlat; ++la) {
    const double lat = (-90.0 + (la + 0.5) * 180.0 / nlat) * kPi / 180.0;
    for (int lo = 0; lo < nlon; ++lo) {
      const double lon = ((lo + 0.5) * 360.0 / nlon) * kPi / 180.0;
      for (int j = 0; j < ts; ++j) {
        const double days = (t0_hours + j * cfg_.time_step_hours) / 24.0;
        for (int k = 0; k < K; ++k) {
          const Wave& w = waves_[k];
          s[k] = std::sin(w.kx * lon + w.ky * lat - 2 * kPi * w.omega * days + w.phase);
        }
        for (int c = 0; c < C; ++c) {
          double v = cfg_.noise * n01(rng);
          for (int k = 0; k < K; ++k) v += mix_[c * K + k] * s[k];
          const double raw = mean_[c] + scale_[c] * v;
          values.push_back(static_cast<float>((raw - mean_[c]) / stdev_[c]));
        }
      }
      const double tod = std::fmod(t0_hours, 24.0) / 24.0;
      centroids.push_back(static_cast<float>(lat / (kPi / 2)));
      centroids.push_back(static_cast<float>(std::sin(lon)));
      centroids.push_back(static_cast<float>(std::cos(lon)));
      centroids.push_back(static_cast<float>(std::sin(2 * kPi * tod)));
      centroids.push_back(static_cast<float>(std::cos(2 * kPi * tod)));
    }
  }
}

}  // namespace wg
