// HEALPix for the data pipeline (wg-data.md §2): point → cell exactly as
// upstream's astropy_healpix, and the per-cell tables the tokeniser and the
// target coordinates use, built once per level.
//
// Invariants:
// - NESTED numbering everywhere, in WeatherGenerator's sphere frame
//   θ = 90° − lat, φ = lon + 180° (§0): cell i is the standard HEALPix cell i
//   of that frame, not of geographic longitude.
// - cell_of() reproduces astropy_healpix bit for bit, poles and cell edges
//   included: the float32 θ/φ steps of §2.2 then a port of astrometry.net's
//   xyztohp (Appendix B), compiled with -ffp-contract=off.
// - Corners, centres and neighbours come from HEALPix C++ (libhealpix_cxx,
//   T_Healpix_Base<int64>); vectors are rebuilt through the lon/lat round
//   trip of §2.3 so that the degenerate vertices at (lat 0, lon 0 / π) get
//   upstream's frames (§2.5, §12.17).
// - Vertex order of every per-vertex table: S, E, N, W, C (HealpixVertex);
//   neighbour order SW, W, NW, N, NE, E, SE, S (astropy / HEALPix C++).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wg {

enum HealpixVertex : int { kVertexS = 0, kVertexE = 1, kVertexN = 2, kVertexW = 3, kVertexC = 4 };
constexpr int kNumVertices = 5;    // S, E, N, W, centre
constexpr int kNumNeighbours = 8;  // SW, W, NW, N, NE, E, SE, S

// §2.2 steps 1–2: upstream's float32 colatitude / azimuth (radians) of a
// point given in geographic degrees, every operation rounded to binary32.
float colatitude32(float lat_deg);
float azimuth32(float lon_deg);

// Appendix B: astrometry.net's xyztohp for a unit vector plus the NESTED
// re-decomposition; `coz` is cos(latitude) as the caller computed it.
int64_t xyz_to_nested(double vx, double vy, double vz, double coz, int64_t nside);

// §2.2 end to end: NESTED cell of a point at geographic (lat°, lon°).
int64_t cell_of_point(float lat_deg, float lon_deg, int64_t nside);

// vecs_to_rots (§2.5): the rotation R with R·v = e_x about v × e_x.
// [9] row-major. The float variant evaluates every op in binary32.
void vec_to_rotation(const double v[3], double r[9]);
void vec_to_rotation(const float v[3], float r[9]);

class HealpixGrid {
 public:
  explicit HealpixGrid(int level);

  int level() const { return level_; }
  int64_t nside() const { return nside_; }
  int64_t num_cells() const { return num_cells_; }

  int64_t cell_of(float lat_deg, float lon_deg) const { return cell_of_point(lat_deg, lon_deg, nside_); }

  // Upstream's unit vectors V_k (§2.3), float64. [5, C, 3]
  const std::vector<double>& vertices() const { return vertices_; }
  // (lon, lat) in radians as astropy's healpix_to_lonlat returns them, lon in
  // [0, 2π), HEALPix φ frame. [5, C, 2]
  const std::vector<double>& vertex_lonlat() const { return vertex_lonlat_; }
  // R_k = f32(vecs_to_rots(V_k)), computed in float64. [5, C, 3, 3]
  const std::vector<float>& rotations() const { return rotations_; }
  // verts_local (§6.3): for vertex frame k, e_x − R_k·V for the 4 other
  // vertices in others(k) order, float64 then rounded. [C, 5, 12]
  const std::vector<float>& verts_local() const { return verts_local_; }
  // Raw neighbours, −1 where missing. [C, 8]
  const std::vector<int64_t>& neighbours() const { return neighbours_; }
  // The model's hp_nbours (wg-model.md §3.3): self, then SW..S, missing → self. [C, 9]
  const std::vector<int32_t>& hp_nbours() const { return hp_nbours_; }
  // f32(V_C), the cell centres. [C, 3]
  const std::vector<float>& centres32() const { return centres32_; }
  // nctrs: f32 centre of neighbour n (missing → own centre). [8, C, 3]
  const std::vector<float>& neighbour_centres() const { return neighbour_centres_; }
  // Rotations of those centres, vecs_to_rots in binary32 arithmetic. [8, C, 3, 3]
  const std::vector<float>& neighbour_rotations() const { return neighbour_rotations_; }

  const float* rotation(int vertex, int64_t cell) const { return &rotations_[(vertex * num_cells_ + cell) * 9]; }
  const float* neighbour_rotation(int n, int64_t cell) const {
    return &neighbour_rotations_[(n * num_cells_ + cell) * 9];
  }

 private:
  int level_;
  int64_t nside_;
  int64_t num_cells_;
  std::vector<double> vertices_;
  std::vector<double> vertex_lonlat_;
  std::vector<float> rotations_;
  std::vector<float> verts_local_;
  std::vector<int64_t> neighbours_;
  std::vector<int32_t> hp_nbours_;
  std::vector<float> centres32_;
  std::vector<float> neighbour_centres_;
  std::vector<float> neighbour_rotations_;
};

}  // namespace wg
