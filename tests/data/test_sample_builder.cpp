// The sample builder on fixture stores (an anemoi O8 store with a missing
// date and a torn chunk, a SYNOP store with a gap): two "ranks" (two Sampler
// shares) read disjoint samples and build exactly what one rank builds; a
// rebuild (also on other threads) is bit-identical; a batch's layout is the
// per-sample layouts concatenated; forecast targets come from the later
// windows; unreadable windows are skipped and counted; empty obs windows are
// spoofed; strategies per sample or per stream; bad options.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>

#include "reader_fixtures.h"
#include "wg/data/sample_builder.h"
#include "wg/data/sampler.h"
#include "wg/util/dates.h"

namespace wg {
namespace {

using namespace reader_testing;
using ::testing::HasSubstr;

constexpr int kLevel = 3;

class SampleBuilderTest : public ::testing::Test {
 protected:
  static inline fs::path dir;
  static inline std::shared_ptr<const HealpixGrid> grid;
  static void SetUpTestSuite() {
    dir = fs::path(::testing::TempDir()) / ("wg_builder_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    make_store("make_anemoi_grid_store.py", dir / "era5.zarr",
               "--grid 8 --dates 40 --levels 500 850 --sst --missing 5 --corrupt-chunk 9");
    make_store("make_obs_store.py", dir / "synop.zarr", "--kind synop --hours 200 --gap 30 42");
    make_store("make_obs_store.py", dir / "atms.zarr", "--kind atms --hours 48");
    grid = std::make_shared<const HealpixGrid>(kLevel);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }

  static PipelineOptions options() {
    PipelineOptions o;
    o.healpix_level = kLevel;
    o.start_date = *parse_yyyymmddhhmm("202001010000");
    o.end_date = *parse_yyyymmddhhmm("202001080000");  // 28 windows of 6 h
    o.seed = 11;
    return o;
  }
  static StreamOptions era5() {
    StreamOptions s;
    s.name = "ERA5";
    s.type = StreamType::Anemoi;
    s.filenames = {(dir / "era5.zarr").string()};
    s.channels = {{}, {"w_", "skt", "tcw", "cp", "tp"}, {}, {"w_", "tcw", "cp", "tp"}};
    return s;
  }
  static StreamOptions synop() {
    StreamOptions s;
    s.name = "SYNOP";
    s.type = StreamType::Obs;
    s.filenames = {(dir / "synop.zarr").string()};
    s.tokens.token_size = 4;
    return s;
  }
  static SampleBuilder builder(const PipelineOptions& o, const std::vector<StreamOptions>& streams) {
    std::vector<StreamInput> in;
    for (const StreamOptions& s : streams) in.push_back({s, open_stream_readers(s, pipeline_windows(o), o.seed)});
    return SampleBuilder(o, std::move(in), grid);
  }
  // A sample id whose first-choice window is `window`.
  static int64_t id_for_window(const SampleBuilder& b, int64_t window) {
    for (int64_t id = 0; id < b.num_candidates(); ++id)
      if (b.window_of(id) == window) return id;
    ADD_FAILURE() << "no id maps to window " << window;
    return 0;
  }
};

TEST_F(SampleBuilderTest, TwoRanksReadDisjointSamplesAndBuildWhatOneRankBuilds) {
  const PipelineOptions o = options();
  const Sampler rank_sampler(o.seed, 16, 2, 2), one_rank(o.seed, 16, 4, 1);
  const SampleBuilder rank0 = builder(o, {era5(), synop()}), rank1 = builder(o, {era5(), synop()});
  const SampleBuilder single = builder(o, {era5(), synop()});
  std::set<int64_t> ids0, ids1, ids_single;
  for (int64_t step = 0; step < rank_sampler.steps_per_epoch(); ++step) {
    const std::vector<int64_t> a = rank_sampler.sample_ids(0, step, 0), b = rank_sampler.sample_ids(0, step, 1);
    const BuiltBatch ba = rank0.batch(a, 0), bb = rank1.batch(b, 0);
    const BuiltBatch bs = single.batch(one_rank.sample_ids(0, step, 0), 0);
    ids0.insert(a.begin(), a.end());
    ids1.insert(b.begin(), b.end());
    // The single rank's batch is rank 0's samples then rank 1's.
    ASSERT_EQ(bs.samples.size(), 4u);
    for (size_t i = 0; i < 2; ++i) {
      for (size_t s = 0; s < 2; ++s) {
        EXPECT_TRUE(same_sample(ba.samples[i][s], bs.samples[i][s])) << "rank 0, id " << a[i];
        EXPECT_TRUE(same_sample(bb.samples[i][s], bs.samples[2 + i][s])) << "rank 1, id " << b[i];
      }
    }
    for (int64_t id : bs.sample_ids) ids_single.insert(id);
  }
  for (int64_t id : ids0) EXPECT_EQ(ids1.count(id), 0u) << id;
  std::set<int64_t> both = ids0;
  both.insert(ids1.begin(), ids1.end());
  EXPECT_EQ(both, ids_single);
  EXPECT_EQ(both.size(), 16u);
}

TEST_F(SampleBuilderTest, RebuildsAreBitIdenticalAlsoOnOtherThreads) {
  const PipelineOptions o = options();
  const SampleBuilder b = builder(o, {era5(), synop()});
  std::vector<BuiltSample> first;
  for (int64_t id = 0; id < 8; ++id) first.push_back(b.sample(id, 2));
  std::vector<BuiltSample> again(8);
  std::thread t1([&] {
    for (int64_t id = 0; id < 8; id += 2) again[size_t(id)] = b.sample(id, 2);
  });
  std::thread t2([&] {
    for (int64_t id = 1; id < 8; id += 2) again[size_t(id)] = b.sample(id, 2);
  });
  t1.join();
  t2.join();
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(first[i].window, again[i].window);
    for (size_t s = 0; s < 2; ++s) EXPECT_TRUE(same_sample(first[i].streams[s], again[i].streams[s])) << i;
  }
  // Reused output buffers (as a loader thread keeps them) change nothing.
  BuiltSample reused;
  for (int64_t id : {5, 0, 7, 3}) {
    b.sample(id, 2, reused);
    EXPECT_EQ(reused.window, first[size_t(id)].window);
    for (size_t s = 0; s < 2; ++s) EXPECT_TRUE(same_sample(reused.streams[s], first[size_t(id)].streams[s])) << id;
  }
  BuiltBatch batch;
  for (const std::vector<int64_t>& ids : {std::vector<int64_t>{1, 2}, std::vector<int64_t>{6, 4}}) {
    b.batch(ids, 2, batch);
    for (size_t i = 0; i < 2; ++i)
      for (size_t s = 0; s < 2; ++s) EXPECT_TRUE(same_sample(batch.samples[i][s], first[size_t(ids[i])].streams[s]));
  }
  // Another mini-epoch: same window, other masks.
  const BuiltSample other = b.sample(0, 3);
  EXPECT_EQ(other.window, first[0].window);
  EXPECT_FALSE(same_sample(other.streams[0], first[0].streams[0]));
  // Samples look like samples: tokens, targets, widths.
  const StreamSample& e = first[0].streams[0];
  EXPECT_EQ(e.stream, "ERA5");
  EXPECT_EQ(e.source_width, 8 + 17);  // 17 source channels (sst, 2d and levels 500, 850)
  EXPECT_EQ(e.num_target_channels, 18);
  EXPECT_GT(e.num_source_tokens(), 0);
  EXPECT_GT(e.targets[0].num_points(), 0);
  EXPECT_EQ(e.targets[0].window_start, first[0].window_start);
}

TEST_F(SampleBuilderTest, BatchLayoutIsThePerSampleLayoutsConcatenated) {
  const SampleBuilder b = builder(options(), {era5(), synop()});
  const std::vector<int64_t> ids{3, 7, 12};
  const BuiltBatch batch = b.batch(ids, 0);
  const BatchLayout& lay = batch.layout;
  const int64_t S = 2, C = grid->num_cells();
  ASSERT_EQ(lay.num_samples, 3);
  std::vector<int32_t> lens{0};
  std::vector<std::vector<int32_t>> tgt(size_t(S), std::vector<int32_t>{0});
  int64_t offset = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const BuiltSample one = b.sample(ids[i], 0);
    for (size_t s = 0; s < 2; ++s) EXPECT_TRUE(same_sample(one.streams[s], batch.samples[i][s]));
    const BatchLayout l = layout_batch({one.streams});
    lens.insert(lens.end(), l.source_cell_lens.begin() + 1, l.source_cell_lens.end());
    for (int64_t s = 0; s < S; ++s) {
      std::vector<int64_t> shifted = l.idxs_embed[size_t(s)];
      for (int64_t& x : shifted) x += offset;
      EXPECT_EQ(lay.idxs_embed[i * size_t(S) + size_t(s)], shifted);
      EXPECT_EQ(lay.idxs_embed_pe[i * size_t(S) + size_t(s)], l.idxs_embed_pe[size_t(s)]);
      const auto& t = l.target_coords_idx[size_t(s)][0];
      tgt[size_t(s)].insert(tgt[size_t(s)].end(), t.begin() + 1, t.end());
    }
    offset += l.num_tokens;
  }
  EXPECT_EQ(lay.source_cell_lens, lens);
  EXPECT_EQ(int64_t(lay.source_cell_lens.size()), 1 + 3 * C);
  EXPECT_EQ(lay.num_tokens, offset);
  for (int64_t s = 0; s < S; ++s) EXPECT_EQ(lay.target_coords_idx[size_t(s)][0], tgt[size_t(s)]);
}

TEST_F(SampleBuilderTest, ForecastTargetsComeFromTheLaterWindows) {
  PipelineOptions o = options();
  o.mode = TrainingMode::Forecast;
  o.forecast_steps = 2;
  o.forecast_offset = 1;
  const SampleBuilder b = builder(o, {era5()});
  EXPECT_EQ(b.num_candidates(), 28 - 3 - 1);  // n_win − floor(6·3/6) − offset
  const StreamReader& reader = *b.stream(0).readers[0];
  int checked = 0;
  for (int64_t id = 0; id < 6; ++id) {
    const BuiltSample s = b.sample(id, 0);
    const StreamSample& e = s.streams[0];
    ASSERT_EQ(e.targets.size(), 4u);  // steps 0 … offset + forecast_steps
    EXPECT_EQ(e.targets[0].num_points(), 0);
    EXPECT_EQ(e.num_source_tokens() > 0, true);
    for (size_t f = 1; f < 4; ++f) {
      const TimeWindow w = b.windows().window(s.window + int64_t(f));
      const StepTargets& t = e.targets[f];
      EXPECT_EQ(t.window_start, w.start);
      const PointSet want = reader.target(w);
      ASSERT_EQ(t.num_points(), int64_t(want.size()));
      for (int64_t x : t.times) EXPECT_TRUE(x >= w.start && x < w.end);
      // The same points and values, in another order: match by (lat, lon).
      auto sorted_rows = [](const std::vector<float>& lat, const std::vector<float>& lon,
                            const std::vector<float>& values, int n) {
        std::vector<std::vector<float>> rows;
        for (size_t p = 0; p < lat.size(); ++p) {
          std::vector<float> r{lat[p], lon[p]};
          r.insert(r.end(), values.begin() + ptrdiff_t(p * size_t(n)), values.begin() + ptrdiff_t((p + 1) * size_t(n)));
          rows.push_back(r);
        }
        std::sort(rows.begin(), rows.end(),
                  [](const auto& a, const auto& b) { return std::make_pair(a[0], a[1]) < std::make_pair(b[0], b[1]); });
        return rows;
      };
      std::vector<float> lat, lon;
      for (int64_t p = 0; p < t.num_points(); ++p)
        lat.push_back(t.coords_raw[size_t(2 * p)]), lon.push_back(t.coords_raw[size_t(2 * p + 1)]);
      const auto got = sorted_rows(lat, lon, t.values, want.num_channels);
      const auto ref = sorted_rows(want.lat, want.lon, want.data, want.num_channels);
      for (size_t p = 0; p < got.size(); ++p) ASSERT_TRUE(same_values(got[p], ref[p])) << "point " << p;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 18);
}

TEST_F(SampleBuilderTest, FilesOfAStreamAreConcatenated) {
  PipelineOptions o = options();
  o.mode = TrainingMode::Forecast;  // offset 0, 0 steps: every point of the window is a target
  StreamOptions twice = synop();
  twice.filenames.push_back(twice.filenames[0]);
  const SampleBuilder one = builder(o, {synop()}), two = builder(o, {twice});
  int compared = 0;
  for (int64_t id = 0; id < 6; ++id) {
    const BuiltSample a = one.sample(id, 0), b = two.sample(id, 0);
    ASSERT_EQ(a.window, b.window);
    EXPECT_EQ(a.streams[0].target_is_spoof, b.streams[0].target_is_spoof);
    if (a.streams[0].target_is_spoof) continue;  // a window in the gap: both spoofed, one point per cell
    EXPECT_EQ(b.streams[0].targets[0].num_points(), 2 * a.streams[0].targets[0].num_points());
    ++compared;
  }
  EXPECT_GE(compared, 4);
}

TEST_F(SampleBuilderTest, UnreadableWindowsAreSkippedAndCounted) {
  const SampleBuilder b = builder(options(), {era5(), synop()});
  const int64_t missing = id_for_window(b, 5), torn = id_for_window(b, 9);
  const BuiltSample m = b.sample(missing, 0);
  EXPECT_NE(m.window, 5);
  EXPECT_GE(m.windows_skipped, 1);
  EXPECT_EQ(b.skipped_samples(), 1);
  const BuiltSample t = b.sample(torn, 0);
  EXPECT_NE(t.window, 9);
  EXPECT_EQ(b.skipped_samples(), 2);
  // The same replacement every time, and in a fresh builder (another rank).
  const SampleBuilder fresh = builder(options(), {era5(), synop()});
  const BuiltSample m2 = fresh.sample(missing, 0), t2 = fresh.sample(torn, 0);
  EXPECT_EQ(m2.window, m.window);
  EXPECT_EQ(t2.window, t.window);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_TRUE(same_sample(m.streams[s], m2.streams[s]));
    EXPECT_TRUE(same_sample(t.streams[s], t2.streams[s]));
  }
}

TEST_F(SampleBuilderTest, EmptyObsWindowsAreSpoofedWithLossWeightZero) {
  const SampleBuilder b = builder(options(), {era5(), synop()});
  const BuiltSample gap = b.sample(id_for_window(b, 6), 0);  // SYNOP has nothing in [36 h, 42 h)
  ASSERT_EQ(gap.window, 6);
  EXPECT_FALSE(gap.streams[0].target_is_spoof);
  EXPECT_TRUE(gap.streams[1].source_is_spoof);
  EXPECT_TRUE(gap.streams[1].target_is_spoof);
  const BuiltSample full = b.sample(id_for_window(b, 2), 0);
  EXPECT_FALSE(full.streams[1].source_is_spoof);
  EXPECT_FALSE(full.streams[1].target_is_spoof);
}

TEST_F(SampleBuilderTest, CombinationDrawsPerSampleOrPerStream) {
  PipelineOptions o = options();
  o.masking.strategy = MaskStrategy::Combination;
  o.masking.strategies = {MaskStrategy::Random, MaskStrategy::Healpix};
  o.masking.probabilities = {0.5, 0.5};
  o.masking.hl_mask = 1;
  o.masking.same_strategy_per_batch = true;
  const SampleBuilder same = builder(o, {era5(), synop()});
  std::set<MaskStrategy> seen;
  for (int64_t id = 0; id < 16; ++id) {
    const BuiltSample s = same.sample(id, 0);
    EXPECT_EQ(s.streams[0].strategy, s.streams[1].strategy) << id;
    seen.insert(s.streams[0].strategy);
  }
  EXPECT_EQ(seen.size(), 2u);
  o.masking.same_strategy_per_batch = false;
  const SampleBuilder per_stream = builder(o, {era5(), synop()});
  int differ = 0;
  for (int64_t id = 0; id < 16; ++id) {
    const BuiltSample s = per_stream.sample(id, 0);
    differ += s.streams[0].strategy != s.streams[1].strategy;
  }
  EXPECT_GT(differ, 0);
}

TEST_F(SampleBuilderTest, SyntheticStreamsGoThroughTheSameTokeniser) {
  StreamOptions syn;
  syn.name = "synthetic";
  syn.type = StreamType::Synthetic;
  syn.synthetic.grid_lat = 12;
  syn.synthetic.grid_lon = 24;
  syn.synthetic.num_channels = 3;
  const SampleBuilder b = builder(options(), {syn, synop()});
  const BuiltSample a = b.sample(4, 0), again = b.sample(4, 0);
  EXPECT_EQ(a.streams[0].source_width, 8 + 3);
  EXPECT_GT(a.streams[0].num_source_tokens(), 0);
  EXPECT_TRUE(same_sample(a.streams[0], again.streams[0]));
}

// Nothing masked (rate 0, not drawn): no window gives a sample, and the
// error counts why instead of blaming damaged data.
TEST_F(SampleBuilderTest, WindowsWithoutTargetsAreCountedInTheError) {
  PipelineOptions o = options();
  o.masking.masking_rate = 0;
  o.masking.masking_rate_sampling = false;
  const SampleBuilder b = builder(o, {era5()});
  try {
    b.sample(0, 0);
    FAIL() << "a sample without any target was built";
  } catch (const PipelineError& e) {
    EXPECT_THAT(e.what(), HasSubstr("windows in a row gave no sample: "));  // the fixture has unreadable ones too
    EXPECT_THAT(e.what(), HasSubstr("had no target point in any stream"));
  }
}

TEST_F(SampleBuilderTest, BadOptionsNameTheKey) {
  PipelineOptions o = options();
  auto error = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const PipelineError& e) {
      return e.what();
    }
    return "(no PipelineError)";
  };
  o.healpix_level = 4;
  EXPECT_THAT(error([&] { builder(o, {era5()}); }), HasSubstr("healpix_level"));
  o = options();
  o.end_date = o.start_date + 6 * 3600;
  EXPECT_THAT(error([&] { builder(o, {era5()}); }), HasSubstr("start_date / end_date"));
  o = options();
  o.masking.strategy = MaskStrategy::Channel;  // needs identical source and target channels
  const std::string e = error([&] { builder(o, {era5()}); });
  EXPECT_THAT(e, HasSubstr("stream 'ERA5'"));
  StreamOptions two = synop();
  two.filenames.push_back((dir / "atms.zarr").string());  // a second file with other columns
  const std::string m = error([&] { builder(options(), {two}); });
  EXPECT_THAT(m, HasSubstr("atms.zarr"));
  EXPECT_THAT(m, HasSubstr("filenames"));
  EXPECT_THAT(m, HasSubstr("selects other channels or geoinfos than the stream's first file"));
  two.filenames.back() = (dir / "era5.zarr").string();  // an anemoi store read as obs
  EXPECT_THAT(error([&] { builder(options(), {two}); }), HasSubstr("era5.zarr"));
}

}  // namespace
}  // namespace wg
