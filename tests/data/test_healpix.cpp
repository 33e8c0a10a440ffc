// HealpixGrid against wg-data.md §2.7's golden values and against upstream's
// library (astropy_healpix, through tests/data/pipeline_reference.py): cell
// of every test point (edges, vertices, both poles), corner and centre
// vectors, rotations, verts_local, neighbours / hp_nbours, neighbour frames.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_pipeline_io.h"
#include "wg/data/healpix.h"

namespace wg {
namespace {

namespace fs = std::filesystem;
using testing_io::near_all;
using testing_io::same_ints;

TEST(HealpixGolden, PointToCell) {
  struct P {
    float lat, lon;
    int64_t cell;
  };
  const P golden[] = {{0, 0, 6570},   {45, -180, 686},      {45, 0, 2734},         {-45, 90, 11938},
                      {89, 10, 3071}, {-89.5f, -170, 8192}, {10.5f, 179.9f, 4912}, {0.7f, -0.7f, 6912}};
  for (const P& p : golden) EXPECT_EQ(cell_of_point(p.lat, p.lon, 32), p.cell) << p.lat << ", " << p.lon;
}

TEST(HealpixGolden, VerticesAndNeighbours) {
  const HealpixGrid grid(5);
  ASSERT_EQ(grid.num_cells(), 12288);
  struct Row {
    int64_t cell;
    double lonlat[5][2];  // degrees, S E N W C
    int64_t nbr[8];
  };
  const Row rows[] = {
      {0,
       {{45, 0}, {46.40625, 1.1937484371}, {45, 2.3880154633}, {43.59375, 1.1937484371}, {45, 1.1937484371}},
       {4437, 4439, 2, 3, 1, 5803, 5802, 9215}},
      {1,
       {{46.40625, 1.1937484371},
        {47.8125, 2.3880154633},
        {46.40625, 3.5833216985},
        {45, 2.3880154633},
        {46.40625, 2.3880154633}},
       {0, 2, 3, 6, 4, 5806, 5803, 5802}},
      {4095,
       {{315, 87.0758196429}, {0, 88.5380288374}, {180, 90}, {270, 88.5380288374}, {315, 88.5380288374}},
       {4094, 3069, 3071, 2047, 1023, 1022, 4093, 4092}},
      {4864,
       {{0, 0}, {1.40625, 1.1937484371}, {0, 2.3880154633}, {358.59375, 1.1937484371}, {0, 1.1937484371}},
       {4693, 4695, 4866, 4867, 4865, 4523, 4522, 4351}},
      {6912,
       {{180, 0}, {181.40625, 1.1937484371}, {180, 2.3880154633}, {178.59375, 1.1937484371}, {180, 1.1937484371}},
       {6741, 6743, 6914, 6915, 6913, 6571, 6570, 6399}},
      {12287,
       {{315, -2.3880154633}, {316.40625, -1.1937484371}, {315, 0}, {313.59375, -1.1937484371}, {315, -1.1937484371}},
       {12286, 7508, 7509, 3072, 4778, 4776, 12285, 12284}},
  };
  const int64_t nc = grid.num_cells();
  for (const Row& r : rows) {
    for (int k = 0; k < kNumVertices; ++k) {
      const double lon = grid.vertex_lonlat()[(k * nc + r.cell) * 2] * 180.0 / M_PI;
      const double lat = grid.vertex_lonlat()[(k * nc + r.cell) * 2 + 1] * 180.0 / M_PI;
      // The pole's longitude is arbitrary (astropy says 180); compare the vector there.
      if (std::fabs(r.lonlat[k][1]) < 90) {
        EXPECT_NEAR(std::fmod(lon + 360.0, 360.0), r.lonlat[k][0], 1e-9) << r.cell << " vertex " << k;
      }
      EXPECT_NEAR(lat, r.lonlat[k][1], 1e-9) << r.cell << " vertex " << k;
    }
    for (int n = 0; n < kNumNeighbours; ++n) EXPECT_EQ(grid.neighbours()[r.cell * 8 + n], r.nbr[n]) << r.cell;
  }
}

// §2.5: the degenerate vertices keep upstream's frames.
TEST(HealpixGolden, DegenerateVertexFrames) {
  const HealpixGrid grid(5);
  const float* r = grid.rotation(kVertexS, 6912);  // vertex (lat 0, lon π)
  EXPECT_NEAR(r[4], -0.6f, 1e-6);
  EXPECT_NEAR(r[5], -0.8f, 1e-6);
  EXPECT_NEAR(r[7], -0.8f, 1e-6);
  EXPECT_NEAR(r[8], 0.6f, 1e-6);
  const float* id = grid.rotation(kVertexS, 4864);  // vertex (lat 0, lon 0): identity, not NaN
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(id[i], (i % 4 == 0) ? 1.0f : 0.0f, 1e-12) << i;
  int repeats = 0;
  for (int64_t c = 0; c < grid.num_cells(); ++c) {
    for (int n = 1; n < 9; ++n) repeats += grid.hp_nbours()[c * 9 + n] == c;
  }
  EXPECT_EQ(repeats, 24);  // 8 W, 4 N, 8 E, 4 S missing neighbours → self
}

class HealpixReference : public ::testing::TestWithParam<int> {};

TEST_P(HealpixReference, TablesMatchAstropy) {
  const int level = GetParam();
  const HealpixGrid grid(level);
  const testing_io::ScratchDir scratch("tables" + std::to_string(level));
  const fs::path& dir = scratch.path();
  ASSERT_TRUE(testing_io::run_reference("tables " + std::to_string(level) + " " + dir.string()));
  EXPECT_TRUE(near_all(grid.vertices(), npy::read<double>(dir / "V.npy"), 1e-14, 3));
  EXPECT_TRUE(near_all(grid.rotations(), npy::read<float>(dir / "R.npy"), 1e-6, 9));
  EXPECT_TRUE(near_all(grid.verts_local(), npy::read<float>(dir / "verts_local.npy"), 1e-6, 12));
  // Reference neighbours are [8, C]; ours [C, 8].
  const auto nbr = npy::read<int64_t>(dir / "nbr_raw.npy");
  std::vector<int64_t> nbr_t(nbr.size());
  const int64_t nc = grid.num_cells();
  for (int64_t c = 0; c < nc; ++c) {
    for (int n = 0; n < 8; ++n) nbr_t[c * 8 + n] = nbr[n * nc + c];
  }
  EXPECT_TRUE(same_ints(grid.neighbours(), nbr_t));
  EXPECT_TRUE(same_ints(grid.hp_nbours(), npy::read<int32_t>(dir / "hp_nbours.npy")));
  EXPECT_TRUE(near_all(grid.neighbour_centres(), npy::read<float>(dir / "nctrs.npy"), 1e-7, 3));
  EXPECT_TRUE(near_all(grid.neighbour_rotations(), npy::read<float>(dir / "R_nbr.npy"), 1e-6, 9));
}

// Cells of random points, exact lattice points (vertices, edges, equator,
// ±30°, both poles) and every representable latitude near the poles.
TEST_P(HealpixReference, CellsMatchAstropy) {
  const int level = GetParam();
  std::vector<float> lat;
  std::vector<float> lon;
  std::mt19937_64 gen(7 + level);
  std::uniform_real_distribution<float> ulat(-90.0f, 90.0f);
  std::uniform_real_distribution<float> ulon(-180.0f, 180.0f);
  for (int i = 0; i < 100000; ++i) {
    lat.push_back(ulat(gen));
    lon.push_back(ulon(gen));
  }
  for (float la = -90.0f; la <= 90.0f; la += 0.25f) {
    for (float lo = -180.0f; lo < 180.0f; lo += 1.40625f / 2) {
      lat.push_back(la);
      lon.push_back(lo);
    }
  }
  for (float la : {90.0f, -90.0f, std::nextafter(90.0f, 0.0f), std::nextafter(-90.0f, 0.0f), 0.0f, -0.0f}) {
    for (float lo = -180.0f; lo < 180.0f; lo += 0.5f) {
      lat.push_back(la);
      lon.push_back(lo);
    }
  }
  const testing_io::ScratchDir scratch("cells" + std::to_string(level));
  const fs::path& dir = scratch.path();
  npy::write(dir / "lat.npy", lat);
  npy::write(dir / "lon.npy", lon);
  ASSERT_TRUE(testing_io::run_reference("cells " + std::to_string(level) + " " + dir.string()));
  const auto want = npy::read<int64_t>(dir / "cells.npy");
  std::vector<int64_t> got(lat.size());
  const int64_t nside = int64_t{1} << level;
  for (size_t i = 0; i < lat.size(); ++i) got[i] = cell_of_point(lat[i], lon[i], nside);
  EXPECT_TRUE(same_ints(got, want));
}

INSTANTIATE_TEST_SUITE_P(Levels, HealpixReference, ::testing::Values(0, 3, 5, 7));

}  // namespace
}  // namespace wg
