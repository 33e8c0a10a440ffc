// The tokeniser, masking application, targets and batch layout against the
// independent numpy reference (tests/data/pipeline_reference.py) on three
// point sets: O96-like, regular 0.25° with poles, obs-like. One reference
// run per point set; every case of it is compared: cell of every point,
// in-cell order, token boundaries, token rows, centroids, target points,
// values, coordinates (atol 1e-6), times and all counts and layouts.
#include <gtest/gtest.h>

#include <map>

#include "test_pipeline_harness.h"

namespace wg {
namespace {

using testing_io::FixtureCase;
using testing_io::PipelineFixture;

MaskingConfig masking(MaskStrategy s, double rate = 0.6, bool sampling = true) {
  MaskingConfig m;
  m.strategy = s;
  m.masking_rate = rate;
  m.masking_rate_sampling = sampling;
  m.hl_mask = 3;
  return m;
}

FixtureCase masking_case(const std::string& name, const std::string& points, const std::string& src,
                         const std::string& tgt, MaskingConfig m, uint64_t sample_id) {
  FixtureCase c;
  c.name = name;
  c.points = points;
  c.source = src;
  c.target = tgt;
  c.masking = m;
  c.sample_id = sample_id;
  return c;
}

TEST(PipelineReference, O96Grid) {
  PipelineFixture fx("o96", 5);
  {
    PointSet one = testing_io::o96_grid(1, fx.window_start, 0);
    ASSERT_EQ(one.size(), 40320u);
    const size_t n = one.size();
    fx.add_points(
        "o96", one,
        {{"src", testing_io::random_channels(n, 4, 1, 0.01)}, {"tgt", testing_io::random_channels(n, 5, 2, 0.01)}},
        {{"src", 4}, {"tgt", 5}});
    // Two dates in one 12 h window, time-major as the anemoi reader gives them.
    PointSet two = testing_io::o96_grid(2, fx.window_start, 6 * 3600);
    fx.add_points("o96x2", two,
                  {{"src", testing_io::random_channels(2 * n, 4, 3, 0.0)},
                   {"tgt", testing_io::random_channels(2 * n, 5, 4, 0.0)}},
                  {{"src", 4}, {"tgt", 5}});
  }
  fx.add_case(masking_case("o96_random", "o96", "src", "tgt", masking(MaskStrategy::Random), 1));
  fx.add_case(masking_case("o96_healpix", "o96", "src", "tgt", masking(MaskStrategy::Healpix), 2));
  MaskingConfig per_cell = masking(MaskStrategy::Channel);
  fx.add_case(masking_case("o96_channel", "o96", "src", "src", per_cell, 3));
  fx.add_case(masking_case("o96_causal", "o96", "src", "tgt", masking(MaskStrategy::Causal), 4));
  fx.add_case(masking_case("o96_block", "o96", "src", "tgt", masking(MaskStrategy::Block), 5));
  FixtureCase sub = masking_case("o96_subsampled", "o96", "src", "tgt", masking(MaskStrategy::Random), 6);
  sub.spacetime = false;
  sub.sampling_rate_target = 0.5;
  sub.max_num_targets = 3000;
  fx.add_case(sub);
  fx.add_case(masking_case("o96_all_masked", "o96", "src", "tgt", masking(MaskStrategy::Random, 1.0, false), 7));
  FixtureCase fc = masking_case("o96_forecast", "o96", "src", "tgt", masking(MaskStrategy::Random), 8);
  fc.forecast = true;
  fc.sampling_rate_target = 0.7;
  fx.add_case(fc);
  FixtureCase space = masking_case("o96x2_space", "o96x2", "src", "tgt", masking(MaskStrategy::Random), 9);
  space.spacetime = false;
  fx.add_case(space);
  fx.add_case(masking_case("o96x2_causal", "o96x2", "src", "tgt", masking(MaskStrategy::Causal, 0.5), 10));
  fx.add_layout("o96_pair", {{"o96_random", "o96_healpix"}});
  ASSERT_TRUE(fx.run());
  fx.compare_all();

  // §4.5: O96 at level 5 with token size 8 gives 12 296 tokens.
  EXPECT_EQ(fx.result("o96_random").partition.num_tokens(), 12296);
  // Both tokenisations of a single date agree (§4.4).
  EXPECT_EQ(fx.result("o96_random").partition.order, fx.result("o96_subsampled").partition.order);
}

TEST(PipelineReference, QuarterDegreeGridWithPoles) {
  PipelineFixture fx("quarter", 5);
  {
    PointSet g = testing_io::quarter_degree_grid(fx.window_start + 3 * 3600);
    ASSERT_EQ(g.size(), 1038240u);
    const size_t n = g.size();
    fx.add_points(
        "q", g,
        {{"src", testing_io::random_channels(n, 2, 11, 0.001)}, {"tgt", testing_io::random_channels(n, 3, 12, 0.001)}},
        {{"src", 2}, {"tgt", 3}});
  }
  fx.add_case(masking_case("q_random", "q", "src", "tgt", masking(MaskStrategy::Random), 21));
  ASSERT_TRUE(fx.run());
  fx.compare_all();
  // The south pole row lands in astropy's odd cells (§2.2: θ32 = f32(π) > π),
  // reproduced rather than HEALPix C++'s pole pixels.
  const auto& cells = fx.result("q_random").partition.point_cell;
  std::map<int64_t, int> pole;
  for (size_t i = cells.size() - 1440; i < cells.size(); ++i) ++pole[cells[i]];
  const std::map<int64_t, int> astropy_pole = {{8190, 360}, {9214, 360}, {10238, 359}, {10239, 1}, {11262, 360}};
  EXPECT_EQ(pole, astropy_pole);
}

TEST(PipelineReference, ObsLikePoints) {
  PipelineFixture fx("obs", 5);
  {
    PointSet p = testing_io::obs_points(30000, 2, fx.window_start, 99);
    const size_t n = p.size();
    fx.add_points(
        "obs", p,
        {{"src", testing_io::random_channels(n, 3, 31, 0.05)}, {"tgt", testing_io::random_channels(n, 3, 32, 0.05)}},
        {{"src", 3}, {"tgt", 3}});
  }
  fx.add_case(masking_case("obs_random", "obs", "src", "tgt", masking(MaskStrategy::Random), 31));
  FixtureCase space = masking_case("obs_space", "obs", "src", "tgt", masking(MaskStrategy::Random), 32);
  space.spacetime = false;
  space.token_size = 5;
  fx.add_case(space);
  MaskingConfig global = masking(MaskStrategy::Channel);
  global.channel_mode = ChannelMaskMode::Global;
  fx.add_case(masking_case("obs_channel_global", "obs", "src", "src", global, 33));
  fx.add_case(masking_case("obs_healpix", "obs", "src", "tgt", masking(MaskStrategy::Healpix), 34));
  fx.add_case(masking_case("obs_causal", "obs", "src", "tgt", masking(MaskStrategy::Causal), 35));
  fx.add_case(masking_case("obs_block", "obs", "src", "tgt", masking(MaskStrategy::Block), 36));
  FixtureCase cap = masking_case("obs_capped", "obs", "src", "tgt", masking(MaskStrategy::Random), 37);
  cap.sampling_rate_target = 0.3;
  cap.max_num_targets = 500;
  fx.add_case(cap);
  FixtureCase tiny = masking_case("obs_cap_one", "obs", "src", "tgt", masking(MaskStrategy::Random), 38);
  tiny.max_num_targets = 1;  // every cell exceeds it: the first cell's first point is kept
  fx.add_case(tiny);
  FixtureCase fc = masking_case("obs_forecast", "obs", "src", "tgt", masking(MaskStrategy::Random), 39);
  fc.forecast = true;
  fc.max_num_targets = 2000;
  fx.add_case(fc);
  fx.add_layout("obs_batch", {{"obs_random", "obs_healpix"}, {"obs_causal", "obs_channel_global"}});
  ASSERT_TRUE(fx.run());
  fx.compare_all();
  EXPECT_EQ(fx.result("obs_cap_one").sample.targets[0].num_points(), 1);
}

}  // namespace
}  // namespace wg
