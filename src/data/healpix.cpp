// HealpixGrid: the per-cell tables of wg-data.md §2.3–2.5 built from HEALPix
// C++ (corners, centres, neighbours), with upstream's lon/lat round trip for
// every vector. The bit-exact arithmetic lives in healpix_exact.cpp.
#include <cmath>
#include <stdexcept>
#include <string>

// HEALPix C++ headers (Debian libhealpix-cxx-dev, pkg-config healpix_cxx).
#include <healpix_base.h>
#include <vec3.h>

#include "wg/data/healpix.h"

namespace wg {

namespace {

// astrometry.net's xyz2radec as astropy_healpix's healpix_to_lonlat applies
// it: lon in [0, 2π), lat by asin, or by atan2 close to the poles.
void xyz_to_lonlat(const vec3& v, double& lon, double& lat) {
  lon = std::atan2(v.y, v.x);
  if (lon < 0.0) lon += 2.0 * M_PI;
  if (std::fabs(v.z) > 0.9) {
    lat = M_PI / 2.0 - std::atan2(std::hypot(v.x, v.y), v.z);
  } else {
    lat = std::asin(v.z);
  }
}

// Upstream rebuilds every vector as s2tor3(π/2 − lat, lon) in float64; this
// is what gives the vertices at (lat 0, lon 0 / π) their 1e-16 residues.
void lonlat_to_vector(double lon, double lat, double* out) {
  const double theta = M_PI / 2.0 - lat;
  out[0] = std::sin(theta) * std::cos(lon);
  out[1] = std::sin(theta) * std::sin(lon);
  out[2] = std::cos(theta);
}

// others(k) of §6.3, in the spec's fixed order.
constexpr int kOthers[kNumVertices][4] = {
    {kVertexE, kVertexN, kVertexW, kVertexC},  // S
    {kVertexS, kVertexN, kVertexW, kVertexC},  // E
    {kVertexS, kVertexE, kVertexW, kVertexC},  // N
    {kVertexS, kVertexN, kVertexE, kVertexC},  // W
    {kVertexS, kVertexE, kVertexN, kVertexW},  // C
};

}  // namespace

HealpixGrid::HealpixGrid(int level) : level_(level) {
  // hp_nbours is int32 (the model's dtype): 12·4^13 cells still fit.
  if (level < 0 || level > 13) {
    throw std::invalid_argument("healpix_level must be in [0, 13], got " + std::to_string(level));
  }
  nside_ = int64_t{1} << level;
  num_cells_ = 12 * nside_ * nside_;
  const int64_t nc = num_cells_;
  const Healpix_Base2 base(level, NEST);

  vertices_.assign(kNumVertices * nc * 3, 0.0);
  vertex_lonlat_.assign(kNumVertices * nc * 2, 0.0);
  neighbours_.assign(nc * kNumNeighbours, -1);
  std::vector<vec3> corners;
  fix_arr<int64, 8> nb;
  for (int64_t c = 0; c < nc; ++c) {
    base.boundaries(c, 1, corners);  // [N, W, S, E]
    const vec3* by_vertex[kNumVertices] = {&corners[2], &corners[3], &corners[0], &corners[1], nullptr};
    const vec3 centre = base.pix2vec(c);
    by_vertex[kVertexC] = &centre;
    for (int k = 0; k < kNumVertices; ++k) {
      double* ll = &vertex_lonlat_[(k * nc + c) * 2];
      xyz_to_lonlat(*by_vertex[k], ll[0], ll[1]);
      lonlat_to_vector(ll[0], ll[1], &vertices_[(k * nc + c) * 3]);
    }
    base.neighbors(c, nb);
    for (int n = 0; n < kNumNeighbours; ++n) neighbours_[c * kNumNeighbours + n] = nb[n];
  }

  rotations_.assign(kNumVertices * nc * 9, 0.0f);
  verts_local_.assign(nc * kNumVertices * 12, 0.0f);
  for (int k = 0; k < kNumVertices; ++k) {
    for (int64_t c = 0; c < nc; ++c) {
      double r[9];
      vec_to_rotation(&vertices_[(k * nc + c) * 3], r);
      for (int i = 0; i < 9; ++i) rotations_[(k * nc + c) * 9 + i] = static_cast<float>(r[i]);
      for (int o = 0; o < 4; ++o) {
        const double* v = &vertices_[(kOthers[k][o] * nc + c) * 3];
        float* out = &verts_local_[(c * kNumVertices + k) * 12 + o * 3];
        for (int i = 0; i < 3; ++i) {
          const double rv = r[3 * i] * v[0] + r[3 * i + 1] * v[1] + r[3 * i + 2] * v[2];
          out[i] = static_cast<float>((i == 0 ? 1.0 : 0.0) - rv);
        }
      }
    }
  }

  centres32_.resize(nc * 3);
  for (int64_t c = 0; c < nc; ++c) {
    for (int i = 0; i < 3; ++i) centres32_[c * 3 + i] = static_cast<float>(vertices_[(kVertexC * nc + c) * 3 + i]);
  }
  hp_nbours_.resize(nc * 9);
  neighbour_centres_.resize(kNumNeighbours * nc * 3);
  neighbour_rotations_.resize(kNumNeighbours * nc * 9);
  for (int64_t c = 0; c < nc; ++c) {
    hp_nbours_[c * 9] = static_cast<int32_t>(c);
    for (int n = 0; n < kNumNeighbours; ++n) {
      int64_t m = neighbours_[c * kNumNeighbours + n];
      if (m < 0) m = c;
      hp_nbours_[c * 9 + 1 + n] = static_cast<int32_t>(m);
      float* ctr = &neighbour_centres_[(n * nc + c) * 3];
      for (int i = 0; i < 3; ++i) ctr[i] = centres32_[m * 3 + i];
      vec_to_rotation(ctr, &neighbour_rotations_[(n * nc + c) * 9]);
    }
  }
}

}  // namespace wg
