// The bit-exact arithmetic of the HEALPix layer: upstream's float32 θ/φ
// (wg-data.md §2.2), astrometry.net's xyztohp as astropy_healpix runs it
// (Appendix B) and vecs_to_rots (§2.5) in float64 and in binary32.
//
// Invariant: every expression is evaluated in the order the spec writes it,
// in the type it names, with no FMA contraction — this file must be compiled
// with -ffp-contract=off (and never with -ffast-math), otherwise cells of
// points on edges and at the poles drift from astropy's.
#include <cmath>

#include "wg/data/healpix.h"

namespace wg {

namespace {

constexpr float kPi32 = static_cast<float>(M_PI);

// C's round(): half away from zero, as astrometry.net uses it.
int c_round(double v) { return static_cast<int>(std::round(v)); }

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Spread the low 32 bits of v onto the even bit positions.
uint64_t spread_bits(uint64_t v) {
  v &= 0xffffffffULL;
  v = (v | (v << 16)) & 0x0000ffff0000ffffULL;
  v = (v | (v << 8)) & 0x00ff00ff00ff00ffULL;
  v = (v | (v << 4)) & 0x0f0f0f0f0f0f0f0fULL;
  v = (v | (v << 2)) & 0x3333333333333333ULL;
  v = (v | (v << 1)) & 0x5555555555555555ULL;
  return v;
}

}  // namespace

float colatitude32(float lat_deg) {
  float t = 90.0f - lat_deg;
  t = t / 180.0f;
  return t * kPi32;
}

float azimuth32(float lon_deg) {
  float p = lon_deg + 180.0f;
  p = p / 360.0f;
  p = p * 2.0f;
  return p * kPi32;
}

int64_t xyz_to_nested(double vx, double vy, double vz, double coz, int64_t nside) {
  const double twothirds = 2.0 / 3.0;
  const double pi = M_PI;
  const double twopi = 2.0 * M_PI;
  const double halfpi = 0.5 * M_PI;
  const double root3 = std::sqrt(3.0);
  const int n = static_cast<int>(nside);

  double phi = std::atan2(vy, vx);
  if (phi < 0.0) phi += twopi;
  const double phi_t = std::fmod(phi, halfpi);

  int base;
  int x;
  int y;
  if ((vz >= twothirds) || (vz <= -twothirds)) {
    const bool north = vz >= twothirds;
    if (!north) vz *= -1.0;
    if (coz == 0.0) coz = std::hypot(vx, vy);
    const double kx = (coz / std::sqrt(1.0 + vz)) * root3 * std::fabs(n * (2.0 * phi_t - pi) / pi);
    const double ky = (coz / std::sqrt(1.0 + vz)) * root3 * n * 2.0 * phi_t / pi;
    double xx;
    double yy;
    if (north) {
      xx = n - kx;
      yy = n - ky;
    } else {
      xx = ky;
      yy = kx;
    }
    // At lat32 < −π/2 (input lat −90°) coz < 0 and these go to −1: kept, as
    // astropy does (the re-decomposition below folds them into base − 1).
    x = static_cast<int>(std::fmin(n - 1, std::floor(xx)));
    y = static_cast<int>(std::fmin(n - 1, std::floor(yy)));
    int offset = c_round((phi - phi_t) / halfpi);
    offset = ((offset % 4) + 4) % 4;
    base = north ? offset : 8 + offset;
  } else {
    const double zunits = (vz + twothirds) / (4.0 / 3.0);
    const double phiunits = phi_t / halfpi;
    const double u1 = zunits + phiunits;
    const double u2 = zunits - phiunits + 1.0;
    double xx = u1 * n;
    double yy = u2 * n;
    int offset = c_round((phi - phi_t) / halfpi);
    offset = ((offset % 4) + 4) % 4;
    if (xx >= n) {
      xx -= n;
      if (yy >= n) {
        yy -= n;
        base = offset;
      } else {
        base = ((offset + 1) % 4) + 4;
      }
    } else {
      if (yy >= n) {
        yy -= n;
        base = offset + 4;
      } else {
        base = 8 + offset;
      }
    }
    x = static_cast<int>(std::fmax(0.0, std::fmin(n - 1, std::floor(xx))));
    y = static_cast<int>(std::fmax(0.0, std::fmin(n - 1, std::floor(yy))));
  }

  const int64_t ns2 = nside * nside;
  const int64_t xy = base * ns2 + static_cast<int64_t>(x) * nside + y;
  const int64_t big = floor_div(xy, ns2);
  const int64_t rest = xy - big * ns2;
  const int64_t xr = floor_div(rest, nside);
  const int64_t yr = rest - xr * nside;
  return big * ns2 +
         static_cast<int64_t>(spread_bits(static_cast<uint64_t>(xr)) | (spread_bits(static_cast<uint64_t>(yr)) << 1));
}

int64_t cell_of_point(float lat_deg, float lon_deg, int64_t nside) {
  const float theta = colatitude32(lat_deg);
  const float phi = azimuth32(lon_deg);
  // astropy's healpy shim: lat = π/2 − θ stays float32 (weak Python scalar).
  const float lat32 = static_cast<float>(M_PI / 2) - theta;
  const double lat = lat32;
  const double lon = phi;
  const double coz = std::cos(lat);
  return xyz_to_nested(coz * std::cos(lon), coz * std::sin(lon), std::sin(lat), coz, nside);
}

namespace {

template <typename T>
void rotation_of(const T v[3], T r[9]) {
  const T c1 = v[0];
  const T c2 = v[1];
  const T c3 = v[2];
  // Squares first, as the spec's formula (c1·c2² + c3²)/s is written.
  const T c2sq = c2 * c2;
  const T c3sq = c3 * c3;
  const T s = c2sq + c3sq;
  const T off = (c1 - T(1)) * c2 * c3 / s;
  r[0] = c1;
  r[1] = c2;
  r[2] = c3;
  r[3] = -c2;
  r[4] = (c1 * c2sq + c3sq) / s;
  r[5] = off;
  r[6] = -c3;
  r[7] = off;
  r[8] = (c2sq + c1 * c3sq) / s;
}

}  // namespace

void vec_to_rotation(const double v[3], double r[9]) { rotation_of(v, r); }
void vec_to_rotation(const float v[3], float r[9]) { rotation_of(v, r); }

}  // namespace wg
