// Synthetic travelling-wave fields as PointSets (see header).
#include "wg/data/synthetic_reader.h"

#include <cmath>
#include <random>

#include "wg/data/seeds.h"

namespace wg {

namespace {
constexpr double kPi = 3.14159265358979323846;
}

SyntheticReader::SyntheticReader(const std::string& stream, const SyntheticOptions& options, const ChannelRules& rules,
                                 uint64_t seed)
    : StreamReader(stream, "synthetic"), opt_(options), seed_(mix_seed(seed, hash_name(stream))) {
  if (opt_.num_channels < 1 || opt_.grid_lat < 1 || opt_.grid_lon < 1 || opt_.num_waves < 1 ||
      !(opt_.time_step_hours > 0))
    throw ReaderError(stream, "synthetic", "synthetic",
                      "num_channels, grid_lat, grid_lon, num_waves and time_step_hours must be > 0");
  // The draws: waves, then per channel mix, offset and scale.
  std::mt19937_64 rng(seed_);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::normal_distribution<double> n01(0.0, 1.0);
  const int K = opt_.num_waves, C = opt_.num_channels;
  const int max_kx = std::max(1, opt_.grid_lon / 8), max_ky = std::max(1, opt_.grid_lat / 4);
  for (int k = 0; k < K; ++k) {
    Wave w;
    w.kx = 1 + std::floor(u01(rng) * max_kx);
    w.ky = 1 + std::floor(u01(rng) * max_ky);
    w.omega = k < K / 2 ? 0.0 : 0.2 + 0.8 * u01(rng);
    w.phase = 2 * kPi * u01(rng);
    waves_.push_back(w);
  }
  mix_.resize(size_t(C) * size_t(K));
  mean_.resize(size_t(C));
  stdev_.resize(size_t(C));
  scale_.resize(size_t(C));
  for (int c = 0; c < C; ++c) {
    double var = opt_.noise * opt_.noise;
    for (int k = 0; k < K; ++k) {
      const double a = n01(rng) / std::sqrt(double(K));
      mix_[size_t(c) * size_t(K) + size_t(k)] = a;
      var += 0.5 * a * a;
    }
    mean_[size_t(c)] = 10.0 * n01(rng);
    scale_[size_t(c)] = std::exp(1.5 * n01(rng));
    stdev_[size_t(c)] = scale_[size_t(c)] * std::sqrt(var);
  }
  std::vector<std::string> names;
  for (int c = 0; c < C; ++c) names.push_back("synthetic_" + std::to_string(c));
  check_includes_match(stream, "synthetic", "source", rules.source, names);
  check_includes_match(stream, "synthetic", "target", rules.target, names);
  for (int c = 0; c < C; ++c) {
    if (channel_selected(names[size_t(c)], rules.source, rules.source_exclude)) {
      src_.push_back(c);
      channels_.source.push_back(names[size_t(c)]);
      channels_.source_mean.push_back(mean_[size_t(c)]);
      channels_.source_stdev.push_back(stdev_[size_t(c)]);
    }
    if (channel_selected(names[size_t(c)], rules.target, rules.target_exclude)) {
      tgt_.push_back(c);
      channels_.target.push_back(names[size_t(c)]);
      channels_.target_mean.push_back(mean_[size_t(c)]);
      channels_.target_stdev.push_back(stdev_[size_t(c)]);
    }
  }
  if (src_.empty() || tgt_.empty())
    throw ReaderError(stream, "synthetic", src_.empty() ? "source_exclude" : "target_exclude",
                      "the rules leave no channel");
  for (int la = 0; la < opt_.grid_lat; ++la) {
    for (int lo = 0; lo < opt_.grid_lon; ++lo) {
      lat_.push_back(static_cast<float>(-90.0 + (la + 0.5) * 180.0 / opt_.grid_lat));
      lon_.push_back(static_cast<float>(-180.0 + (lo + 0.5) * 360.0 / opt_.grid_lon));
    }
  }
}

std::vector<float> SyntheticReader::field(int64_t t) const {
  const int K = opt_.num_waves, C = opt_.num_channels;
  const size_t n = lat_.size();
  std::vector<float> out(n * size_t(C));
  std::mt19937_64 rng(mix_seed(seed_, static_cast<uint64_t>(t)));
  std::normal_distribution<double> n01(0.0, 1.0);
  const double days = double(t) / 86400.0;
  std::vector<double> s(static_cast<size_t>(K));
  for (size_t p = 0; p < n; ++p) {
    const double lat = double(lat_[p]) * kPi / 180.0, lon = double(lon_[p]) * kPi / 180.0;
    for (int k = 0; k < K; ++k) {
      const Wave& w = waves_[size_t(k)];
      s[size_t(k)] = std::sin(w.kx * lon + w.ky * lat - 2 * kPi * w.omega * days + w.phase);
    }
    for (int c = 0; c < C; ++c) {
      double v = opt_.noise * n01(rng);
      for (int k = 0; k < K; ++k) v += mix_[size_t(c) * size_t(K) + size_t(k)] * s[size_t(k)];
      const double raw = mean_[size_t(c)] + scale_[size_t(c)] * v;
      out[p * size_t(C) + size_t(c)] = static_cast<float>((raw - mean_[size_t(c)]) / stdev_[size_t(c)]);
    }
  }
  return out;
}

void SyntheticReader::read(const TimeWindow& window, PointSet* source, PointSet* target) const {
  if (source) reset_points(*source, true);
  if (target) reset_points(*target, false);
  if (!source && !target) return;
  const int64_t dt = static_cast<int64_t>(std::llround(opt_.time_step_hours * 3600.0));
  const int64_t first = window.start >= 0 ? (window.start + dt - 1) / dt : -((-window.start) / dt);
  const size_t n = lat_.size(), C = size_t(opt_.num_channels);
  for (int64_t k = first; k * dt < window.end; ++k) {
    const int64_t t = k * dt;
    const std::vector<float> f = field(t);  // [n, C]
    auto add = [&](PointSet& out, const std::vector<int>& idx) {
      out.lat.insert(out.lat.end(), lat_.begin(), lat_.end());
      out.lon.insert(out.lon.end(), lon_.begin(), lon_.end());
      out.times.insert(out.times.end(), n, t);
      for (size_t p = 0; p < n; ++p)
        for (int c : idx) out.data.push_back(f[p * C + size_t(c)]);
    };
    if (source) add(*source, src_);
    if (target) add(*target, tgt_);
  }
}

}  // namespace wg
