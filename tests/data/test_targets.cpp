// Targets and whole stream samples (wg-data.md §3.4, §6, §10): subsampling
// rules, forecast selection, spoofing, streams without source tokens (the
// stale-mask fix), one-point time slices, NaN handling, and that a sample
// depends only on its key, not on what was built before it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "test_pipeline_harness.h"
#include "wg/data/pipeline_error.h"
#include "wg/data/stream_sample.h"

namespace wg {
namespace {

const HealpixGrid& grid5() {
  static const HealpixGrid g(5);
  return g;
}

PointSet obs(int n, uint64_t seed, int channels = 3) {
  PointSet p = testing_io::obs_points(n, 1, 0, seed);
  p.num_channels = channels;
  p.data = testing_io::random_channels(p.size(), channels, seed + 1, 0.1);
  return p;
}

TargetSelection all_points(const TokenPartition& part) {
  TokenMask m = all_masked_mask(MaskStrategy::Random);
  return mask_target(m, part, part);
}

TEST(Targets, SamplingRateKeepsThatFractionInOrder) {
  const PointSet p = obs(20000, 1);
  const TokenPartition part = partition_points(grid5(), p, 8, true, "obs");
  const TargetSelection sel = all_points(part);
  PipelineRng srng(1, 0, 1, 0, RngPurpose::TargetSampling);
  PipelineRng crng(1, 0, 1, 0, RngPurpose::TargetCap);
  const TargetSelection sub = subsample_targets(sel, 12288, 0.3, -1, srng, crng);
  EXPECT_NEAR(static_cast<double>(sub.points.size()) / sel.points.size(), 0.3, 0.015);
  // A subsequence of the selection, cell_lens consistent.
  int64_t total = 0;
  for (int32_t l : sub.cell_lens) total += l;
  EXPECT_EQ(total, static_cast<int64_t>(sub.points.size()));
  std::vector<int64_t> pos(p.size(), -1);
  for (size_t k = 0; k < sel.points.size(); ++k) pos[sel.points[k]] = static_cast<int64_t>(k);
  for (size_t k = 1; k < sub.points.size(); ++k) ASSERT_LT(pos[sub.points[k - 1]], pos[sub.points[k]]);
}

TEST(Targets, MaxNumTargetsKeepsWholeCellsOfAPrefix) {
  const PointSet p = obs(20000, 2);
  const TokenPartition part = partition_points(grid5(), p, 8, true, "obs");
  const TargetSelection sel = all_points(part);
  const std::vector<int64_t> order = PipelineRng(3, 0, 0, 0, RngPurpose::TargetCap).permutation(12288);
  const TargetSelection cap = cap_targets_from_draws(sel, 1000, order);
  EXPECT_LE(cap.points.size(), 1000u);
  size_t taken = 0;
  int64_t total = 0;
  for (; taken < order.size() && total + sel.cell_lens[order[taken]] <= 1000; ++taken) {
    total += sel.cell_lens[order[taken]];
  }
  EXPECT_EQ(static_cast<int64_t>(cap.points.size()), total);
  for (size_t k = 0; k < order.size(); ++k) {
    ASSERT_EQ(cap.cell_lens[order[k]], k < taken ? sel.cell_lens[order[k]] : 0) << k;
  }
  // The first cell alone is over the limit: its first points, not nothing.
  std::vector<int64_t> big_first = order;
  const int64_t fullest = std::max_element(sel.cell_lens.begin(), sel.cell_lens.end()) - sel.cell_lens.begin();
  std::iter_swap(big_first.begin(), std::find(big_first.begin(), big_first.end(), fullest));
  const TargetSelection one = cap_targets_from_draws(sel, 2, big_first);
  ASSERT_EQ(one.points.size(), 2u);
  EXPECT_EQ(one.cell_lens[fullest], 2);
}

TEST(Targets, ForecastOrdersEachCellRandomly) {
  const PointSet p = obs(5000, 3);
  const TokenPartition part = partition_points(grid5(), p, 8, false, "obs");
  PipelineRng s1(1, 0, 9, 0, RngPurpose::TargetSampling), o1(1, 0, 9, 0, RngPurpose::ForecastOrder);
  PipelineRng s2(1, 0, 9, 0, RngPurpose::TargetSampling), o2(1, 0, 9, 0, RngPurpose::ForecastOrder);
  const TargetSelection a = forecast_targets(part.point_cell, 12288, 1.0, s1, o1);
  const TargetSelection b = forecast_targets(part.point_cell, 12288, 1.0, s2, o2);
  EXPECT_EQ(a.points, b.points);
  ASSERT_EQ(a.points.size(), p.size());
  std::vector<int64_t> sorted = a.points;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], static_cast<int64_t>(i));
  int64_t k = 0;
  int reordered = 0;
  for (int64_t c = 0; c < 12288; ++c) {
    for (int32_t j = 0; j < a.cell_lens[c]; ++j, ++k) ASSERT_EQ(part.point_cell[a.points[k]], c);
    if (a.cell_lens[c] > 1) reordered += !std::is_sorted(a.points.begin() + k - a.cell_lens[c], a.points.begin() + k);
  }
  EXPECT_GT(reordered, 0);
}

// Upstream's forecast tokenizer treats a target of fewer than 2 points as
// empty ("to avoid special case handling"); here one point is one target
// (docs/upstream-differences.md).
TEST(Targets, AOnePointForecastTargetIsKept) {
  PipelineRng s(1, 0, 9, 0, RngPurpose::TargetSampling), o(1, 0, 9, 0, RngPurpose::ForecastOrder);
  const TargetSelection sel = forecast_targets({42}, 12288, 1.0, s, o);  // one point, in cell 42
  ASSERT_EQ(sel.points.size(), 1u);
  EXPECT_EQ(sel.cell_lens[42], 1);
}

TEST(Spoof, OnePointPerCellAtTheCentreInThePhiFrame) {
  const std::vector<double> means = {273.15, 1013.0};
  const PointSet s = spoof_points(grid5(), means, 2, 1000);
  ASSERT_EQ(s.size(), 12288u);
  const auto& ll = grid5().vertex_lonlat();
  std::set<int64_t> cells;
  for (int64_t c = 0; c < 12288; ++c) {
    ASSERT_GE(s.lon[c], 0.0f);
    ASSERT_LT(s.lon[c], 360.0f);
    ASSERT_EQ(s.data[c * 2], 273.15f);
    ASSERT_EQ(s.times[c], 1000);
    // §12.8: the +180° shift puts spoof point c into the cell centred at φ_c + π.
    const int64_t cell = grid5().cell_of(s.lat[c], s.lon[c]);
    cells.insert(cell);
    const double lon_c = ll[(kVertexC * 12288 + c) * 2];
    const double lon_cell = ll[(kVertexC * 12288 + cell) * 2];
    ASSERT_NEAR(std::remainder(lon_cell - lon_c - M_PI, 2 * M_PI), 0.0, 1e-6) << c;
    ASSERT_NEAR(ll[(kVertexC * 12288 + cell) * 2 + 1], ll[(kVertexC * 12288 + c) * 2 + 1], 1e-6);
  }
  EXPECT_EQ(cells.size(), 12288u);  // the grid maps onto itself
}

TEST(StreamSample, EmptyStreamsAreSpoofedAndFlagged) {
  StreamTokenConfig cfg;
  cfg.name = "SYNOP";
  MaskingConfig masking;
  PointSet empty;
  empty.num_channels = 2;
  empty.num_geoinfos = 1;
  const SpoofMeans means{{1.0, 2.0}, {3.0, 4.0}};
  const StreamSample s =
      build_masking_sample(grid5(), cfg, masking, masking.strategy, empty, empty, 0, means, SampleKey{1, 0, 2, 0});
  EXPECT_TRUE(s.source_is_spoof);
  EXPECT_TRUE(s.target_is_spoof);
  EXPECT_GT(s.num_source_tokens(), 0);
  EXPECT_EQ(s.source_width, 8 + 1 + 2);
  EXPECT_EQ(s.target_coord_width, 106);
  EXPECT_GT(s.targets[0].num_points(), 0);
}

// §12.4: no source tokens (diagnostic, < 2 points) → every target point is a
// target, whatever was masked before; upstream reuses a stale mask.
TEST(StreamSample, NoSourceTokensMakesEveryPointATarget) {
  const PointSet p = obs(3000, 4);
  StreamTokenConfig cfg;
  cfg.name = "diag";
  cfg.diagnostic = true;
  MaskingConfig masking;
  const StreamSample s = build_masking_sample(grid5(), cfg, masking, MaskStrategy::Random, p, p, 0, {}, {1, 0, 3, 1});
  EXPECT_EQ(s.num_source_tokens(), 0);
  EXPECT_EQ(s.targets[0].num_points(), static_cast<int64_t>(p.size()));
  PointSet one = p;
  one.lat.resize(1);
  one.lon.resize(1);
  one.times.resize(1);
  one.geoinfos.resize(1);
  one.data.resize(3);
  cfg.diagnostic = false;
  const StreamSample t =
      build_masking_sample(grid5(), cfg, masking, MaskStrategy::Healpix, one, one, 0, {}, {1, 0, 3, 2});
  EXPECT_EQ(t.num_source_tokens(), 0);
  EXPECT_EQ(t.targets[0].num_points(), 1);
}

// §12.9: a time stamp with one point crashes upstream's spacetime tokeniser.
TEST(StreamSample, OnePointTimeSliceIsOneToken) {
  PointSet p = obs(200, 5);
  p.lat.push_back(10.0f);
  p.lon.push_back(20.0f);
  p.times.push_back(12345);  // unique time stamp
  p.geoinfos.push_back(0.5f);
  for (int j = 0; j < 3; ++j) p.data.push_back(1.0f);
  const TokenPartition part = partition_points(grid5(), p, 8, true, "obs");
  const int64_t i = static_cast<int64_t>(p.size()) - 1;
  const int64_t k = std::find(part.order.begin(), part.order.end(), i) - part.order.begin();
  const int64_t t =
      std::upper_bound(part.token_start.begin(), part.token_start.end(), k) - part.token_start.begin() - 1;
  EXPECT_EQ(part.token_points(t), 1);
  const std::vector<float> rows = source_token_rows(grid5(), p, part, 0);
  const int w = row_width(1, 3);
  for (int r = 1; r < 8; ++r) {
    for (int c = 0; c < w; ++c) ASSERT_EQ(rows[(t * 8 + r) * w + c], 0.0f);  // padding rows
  }
}

TEST(StreamSample, NanSourceIsZeroTargetStaysNan) {
  PointSet p = obs(4000, 6);
  for (size_t i = 0; i < p.data.size(); i += 7) p.data[i] = std::nanf("");
  StreamTokenConfig cfg;
  cfg.name = "obs";
  MaskingConfig masking;
  const StreamSample s = build_masking_sample(grid5(), cfg, masking, MaskStrategy::Random, p, p, 0, {}, {1, 0, 4, 0});
  for (float v : s.source_tokens) ASSERT_FALSE(std::isnan(v));
  const auto& tv = s.targets[0].values;
  EXPECT_GT(std::count_if(tv.begin(), tv.end(), [](float v) { return std::isnan(v); }), 0);
  for (float v : s.targets[0].coords) ASSERT_TRUE(std::isfinite(v));
}

// A NaN geoinfo (a station without its altitude, say) is 0 in the target
// coordinates as in the source rows: upstream copies it raw, its coordinate
// embedding gives NaN and the whole stream's prediction is dropped for the
// batch (docs/upstream-differences.md).
TEST(StreamSample, NanGeoinfoIsZeroInTheTargetCoordinates) {
  PointSet p = obs(4000, 9);
  ASSERT_EQ(p.num_geoinfos, 1);
  for (size_t i = 0; i < p.geoinfos.size(); i += 5) p.geoinfos[i] = std::nanf("");
  StreamTokenConfig cfg;
  cfg.name = "obs";
  MaskingConfig masking;
  const StreamSample s = build_masking_sample(grid5(), cfg, masking, MaskStrategy::Random, p, p, 0, {}, {1, 0, 4, 0});
  ASSERT_GT(s.targets[0].num_points(), 0);
  for (float v : s.targets[0].coords) ASSERT_TRUE(std::isfinite(v));
  for (float v : s.source_tokens) ASSERT_FALSE(std::isnan(v));
}

// §12.11: upstream hands 1-D empty tensors on; here an empty target is
// empty arrays of the right widths and all-zero counts.
TEST(StreamSample, EmptyTargetAfterSamplingIsWellFormed) {
  const PointSet p = obs(2000, 8);
  StreamTokenConfig cfg;
  cfg.name = "obs";
  cfg.sampling_rate_target = 0.0;
  MaskingConfig masking;
  const StreamSample s = build_masking_sample(grid5(), cfg, masking, MaskStrategy::Random, p, p, 0, {}, {1, 0, 5, 0});
  EXPECT_TRUE(s.target_empty());
  EXPECT_EQ(s.targets[0].num_points(), 0);
  EXPECT_TRUE(s.targets[0].values.empty());
  EXPECT_TRUE(s.targets[0].coords.empty());
  EXPECT_EQ(s.targets[0].cell_lens, std::vector<int32_t>(12288, 0));
  EXPECT_GT(s.num_source_tokens(), 0);
}

TEST(StreamSample, NonFiniteCoordinateNamesTheStream) {
  PointSet p = obs(100, 9);
  p.lon[17] = std::nanf("");
  try {
    partition_points(grid5(), p, 8, true, "SYNOP");
    FAIL();
  } catch (const PipelineError& e) {
    EXPECT_EQ(std::string(e.what()),
              "stream 'SYNOP', coordinates: point 17 has a non-finite lat/lon (the reader must drop it)");
  }
}

TEST(StreamSample, DependsOnlyOnItsKey) {
  const PointSet p = obs(3000, 7);
  StreamTokenConfig cfg;
  cfg.name = "obs";
  cfg.sampling_rate_target = 0.5;
  cfg.max_num_targets = 800;
  MaskingConfig masking;
  auto build = [&](uint64_t id) {
    return build_masking_sample(grid5(), cfg, masking, MaskStrategy::Random, p, p, 0, {}, {11, 2, id, 1});
  };
  const StreamSample a5 = build(5);
  const StreamSample a6 = build(6);
  const StreamSample b6 = build(6);
  const StreamSample b5 = build(5);
  EXPECT_EQ(a5.source_tokens, b5.source_tokens);
  EXPECT_EQ(a5.targets[0].times, b5.targets[0].times);
  EXPECT_EQ(a6.source_lens, b6.source_lens);
  EXPECT_NE(a5.source_lens, a6.source_lens);
  // The buffer-reusing overload gives the same sample.
  StreamSample reused = a6;
  build_masking_sample(grid5(), cfg, masking, MaskStrategy::Random, p, p, 0, {}, {11, 2, 5, 1}, reused);
  EXPECT_EQ(reused.source_tokens, a5.source_tokens);
  EXPECT_EQ(reused.source_centroids, a5.source_centroids);
  EXPECT_EQ(reused.targets[0].coords, a5.targets[0].coords);
  EXPECT_EQ(reused.masking_rate, a5.masking_rate);
}

}  // namespace
}  // namespace wg
