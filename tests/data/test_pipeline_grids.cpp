// Point sets of the pipeline tests, built here: an O96-like octahedral
// reduced Gaussian grid (96 rings per hemisphere, ring i from the pole has
// 4i + 16 points: 40 320 points), the regular 0.25° grid with both poles
// (721 × 1440 = 1 038 240 points) and an obs-like irregular set with
// geoinfos and several time stamps. Coordinates go through the anemoi
// reader's conversion (§3.1.4: float32 lat, lon wrapped to [−180, 180)).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "test_pipeline_harness.h"

namespace wg::testing_io {

namespace {

// Roots of the Legendre polynomial P_n, descending (north → south), in degrees.
std::vector<double> gaussian_latitudes(int n) {
  std::vector<double> lat(n);
  for (int i = 0; i < n; ++i) {
    double x = std::cos(M_PI * (i + 0.75) / (n + 0.5));
    for (int it = 0; it < 100; ++it) {
      double p0 = 1.0;
      double p1 = x;
      for (int k = 2; k <= n; ++k) {
        const double p2 = ((2.0 * k - 1.0) * x * p1 - (k - 1.0) * p0) / k;
        p0 = p1;
        p1 = p2;
      }
      const double dp = n * (x * p1 - p0) / (x * x - 1.0);
      const double dx = p1 / dp;
      x -= dx;
      if (std::fabs(dx) < 1e-16) break;
    }
    lat[i] = std::asin(x) * 180.0 / M_PI;
  }
  return lat;
}

// The anemoi reader's coordinate conversion (§3.1.4 step 4).
float reader_lat(double lat64) { return static_cast<float>(2.0 * std::clamp(lat64, -90.0, 90.0) - lat64); }
float reader_lon(double lon64) {
  double m = std::fmod(lon64 + 180.0, 360.0);
  if (m < 0) m += 360.0;
  return static_cast<float>(m - 180.0);
}

}  // namespace

PointSet o96_grid(int num_dates, int64_t first_time, int64_t step) {
  const std::vector<double> lats = gaussian_latitudes(192);
  PointSet one;
  for (int r = 0; r < 192; ++r) {
    const int ring = r < 96 ? r + 1 : 192 - r;  // 1 at each pole
    const int n = 4 * ring + 16;
    for (int j = 0; j < n; ++j) {
      one.lat.push_back(reader_lat(lats[r]));
      one.lon.push_back(reader_lon(360.0 * j / n));
    }
  }
  PointSet p;
  for (int d = 0; d < num_dates; ++d) {
    p.lat.insert(p.lat.end(), one.lat.begin(), one.lat.end());
    p.lon.insert(p.lon.end(), one.lon.begin(), one.lon.end());
    p.times.insert(p.times.end(), one.lat.size(), first_time + d * step);
  }
  return p;
}

PointSet quarter_degree_grid(int64_t time) {
  PointSet p;
  for (int i = 0; i <= 720; ++i) {
    for (int j = 0; j < 1440; ++j) {
      p.lat.push_back(reader_lat(90.0 - 0.25 * i));
      p.lon.push_back(reader_lon(0.25 * j));
    }
  }
  p.times.assign(p.lat.size(), time);
  return p;
}

PointSet obs_points(int n, int num_geoinfos, int64_t window_start, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> uz(-1.0, 1.0);
  std::uniform_real_distribution<double> ulon(-180.0, 180.0);
  std::normal_distribution<float> ng(0.0f, 1.0f);
  // Time stamps inside a 6 h window; ws + 777 gets exactly one point (a
  // one-point time slice crashes upstream's spacetime tokeniser, §12.9).
  const int64_t offsets[] = {0, 600, 3600, 3617, 7200, 14400, 21000};
  std::uniform_int_distribution<int> ut(0, 6);
  struct Obs {
    int64_t t;
    float lat, lon;
  };
  std::vector<Obs> obs;
  for (int i = 0; i < n; ++i) {
    obs.push_back({window_start + offsets[ut(gen)], static_cast<float>(std::asin(uz(gen)) * 180.0 / M_PI),
                   static_cast<float>(ulon(gen))});
  }
  // Exact poles, vertices, edges and repeated positions (ties in θ).
  const float special[][2] = {{90, 0},          {-90, 0},      {-90, 45},  {90, -180},    {0, 0},
                              {0, -180},        {0, 90},       {30, 0},    {-30, 45},     {0, 0},
                              {41.8103149f, 0}, {0.7f, -0.7f}, {45, -180}, {-89.5f, -170}};
  for (const auto& s : special) {
    for (int64_t off : {int64_t{0}, int64_t{7200}}) obs.push_back({window_start + off, s[0], s[1]});
  }
  obs.push_back({window_start + 777, 12.5f, 33.25f});
  // Obs tables are time-sorted; keep the generation order inside a time.
  std::stable_sort(obs.begin(), obs.end(), [](const Obs& a, const Obs& b) { return a.t < b.t; });
  PointSet p;
  p.num_geoinfos = num_geoinfos;
  for (const Obs& o : obs) {
    p.lat.push_back(o.lat);
    p.lon.push_back(o.lon);
    p.times.push_back(o.t);
    for (int g = 0; g < num_geoinfos; ++g) p.geoinfos.push_back(ng(gen));
  }
  return p;
}

std::vector<float> random_channels(size_t n_points, int n_channels, uint64_t seed, double nan_fraction) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nv(0.0f, 1.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> v(n_points * n_channels);
  for (float& x : v) x = u(gen) < nan_fraction ? std::nanf("") : nv(gen);
  return v;
}

}  // namespace wg::testing_io
