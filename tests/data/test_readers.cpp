// Time windows, the anemoi reader and the synthetic reader. The anemoi
// reader's PointSets are checked bit for bit against an independent numpy
// reading of fixture stores (readers_reference.py, written from the spec):
// channel selection and order, coordinates, time order, normalisation, NaN
// handling, missing dates, windows outside the data, misaligned windows and
// a stream frequency; the synthetic reader for determinism.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "reader_fixtures.h"
#include "wg/data/anemoi_reader.h"
#include "wg/data/synthetic_reader.h"
#include "wg/data/time_windows.h"
#include "wg/util/dates.h"

namespace wg {
namespace {

using namespace reader_testing;
using ::testing::HasSubstr;
using Names = std::vector<std::string>;  // an include list of ChannelRules

// ---- time windows ------------------------------------------------------------

TEST(TimeWindows, HandlerCountsAndWindows) {
  const TimeWindowHandler w = TimeWindowHandler::from_hours(at("202001010000"), at("202001020300"), 6, 6);
  EXPECT_EQ(w.count(), 4);  // floor(27 h / 6 h)
  EXPECT_EQ(w.window(0).start, at("202001010000"));
  EXPECT_EQ(w.window(3).end, at("202001020000"));
  EXPECT_THROW(TimeWindowHandler(0, 10, 0, 6), std::invalid_argument);
  EXPECT_THROW(TimeWindowHandler(10, 0, 6, 6), std::invalid_argument);
}

TEST(TimeWindows, DatasetIndexesAsUpstream) {
  const int64_t h = 3600, d0 = 1000 * h;
  // Aligned 6 h windows on 6-hourly data: one date each.
  EXPECT_EQ(dataset_indexes({d0, d0 + 6 * h}, d0, d0 + 60 * h, 6 * h), (std::vector<int64_t>{0}));
  EXPECT_EQ(dataset_indexes({d0 + 12 * h, d0 + 24 * h}, d0, d0 + 60 * h, 6 * h), (std::vector<int64_t>{2, 3}));
  // end ≤ data_end is required: the window starting at the last date is empty.
  EXPECT_TRUE(dataset_indexes({d0 + 60 * h, d0 + 66 * h}, d0, d0 + 60 * h, 6 * h).empty());
  EXPECT_TRUE(dataset_indexes({d0 - 6 * h, d0}, d0, d0 + 60 * h, 6 * h).empty());
  // Misaligned by 3 h: the next date.
  EXPECT_EQ(dataset_indexes({d0 + 3 * h, d0 + 9 * h}, d0, d0 + 60 * h, 6 * h), (std::vector<int64_t>{1}));
  // Misaligned, no date inside: empty.
  EXPECT_TRUE(dataset_indexes({d0 + 1 * h, d0 + 5 * h}, d0, d0 + 60 * h, 6 * h).empty());
  // §12.16: [3 h, 12 h): upstream's formula gives dates 6 h and 12 h (then
  // asserts); the 12 h date is past the window and dropped here.
  EXPECT_EQ(dataset_indexes({d0 + 3 * h, d0 + 12 * h}, d0, d0 + 60 * h, 6 * h), (std::vector<int64_t>{1}));
}

// ---- anemoi --------------------------------------------------------------------

const ChannelRules kEra5Rules{{}, {"w_", "skt", "tcw", "cp", "tp"}, {}, {"w_", "tcw", "cp", "tp"}};

class AnemoiReaderTest : public ::testing::Test {
 protected:
  static inline fs::path dir;
  static void SetUpTestSuite() {
    dir = fs::path(::testing::TempDir()) / ("wg_readers_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    make_store("make_anemoi_grid_store.py", dir / "o8.zarr",
               "--grid 8 --dates 40 --levels 500 850 --sst --edge-coords --missing 5 --unlisted 2d "
               "--constant-only sdor --ensembles 2");
    make_store("make_anemoi_grid_store.py", dir / "o8_n2i.zarr",
               "--grid 8 --dates 12 --levels 850 --name-to-index --singular-coords");
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }

  // Runs the reference on `store` for windows 0 … n-1 (+ extra) and returns its manifest.
  static nlohmann::json reference(const std::string& store, const fs::path& out, const std::string& period,
                                  const std::string& extra, const std::vector<int64_t>& windows) {
    std::string w;
    for (int64_t k : windows) w += " " + std::to_string(k);
    run_readers_reference("anemoi " + (dir / store).string() + " " + out.string() + " " + period + " " + extra +
                          " --windows" + w);
    std::ifstream f(out / "manifest.json");
    return nlohmann::json::parse(f);
  }

  // C++ PointSets of every window listed in the manifest against the reference.
  static void compare_windows(const AnemoiReader& r, const TimeWindowHandler& tw, const nlohmann::json& m,
                              const fs::path& out) {
    for (const auto& [key, info] : m["windows"].items()) {
      const int64_t k = std::stoll(key);
      SCOPED_TRACE("window " + key);
      const TimeWindow w = tw.window(k);
      ASSERT_EQ(w.start, info["start"].get<int64_t>());
      EXPECT_EQ(r.window_dates(w), info["dates"].get<std::vector<int64_t>>());
      const std::string status = info["status"];
      if (status == "missing") {
        EXPECT_THROW(r.source(w), UnreadableWindow);
        continue;
      }
      PointSet src, tgt;
      r.read(w, &src, &tgt);
      EXPECT_EQ(src.num_channels, int(r.source_channels().size()));
      EXPECT_EQ(tgt.num_channels, int(r.target_channels().size()));
      EXPECT_EQ(src.num_geoinfos, 0);
      if (status == "empty") {
        EXPECT_TRUE(src.empty());
        EXPECT_TRUE(tgt.empty());
        continue;
      }
      const std::string p = (out / ("w" + key + "_")).string();
      EXPECT_TRUE(same_bits(src.lat, npy::read<float>(p + "lat.npy")));
      EXPECT_TRUE(same_bits(src.lon, npy::read<float>(p + "lon.npy")));
      EXPECT_TRUE(same_bits(src.times, npy::read<int64_t>(p + "times.npy")));
      EXPECT_TRUE(same_values(src.data, npy::read<float>(p + "src.npy"), src.num_channels));
      EXPECT_TRUE(same_values(tgt.data, npy::read<float>(p + "tgt.npy"), tgt.num_channels));
      EXPECT_EQ(tgt.lat, src.lat);
      EXPECT_TRUE(src.geoinfos.empty());
      // Read alone, the source is the same (its channels are then all normalised from raw).
      EXPECT_TRUE(same_bits(r.source(w).data, src.data));
      EXPECT_TRUE(same_bits(r.target(w).data, tgt.data));
    }
  }
};

TEST_F(AnemoiReaderTest, ChannelsAndWindowsMatchTheReference) {
  testing_io::ScratchDir out("anemoi_ref");
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202001100000"), 6, 6);
  std::vector<int64_t> windows;
  for (int64_t k = 0; k < tw.count() + 3; ++k) windows.push_back(k);
  const nlohmann::json m = reference("o8.zarr", out, "--start 202001010000 --end 202001100000 --len-hrs 6 --step-hrs 6",
                                     "--source-exclude w_ skt tcw cp tp --target-exclude w_ tcw cp tp", windows);
  const AnemoiReader r("ERA5", (dir / "o8.zarr").string(), kEra5Rules, tw);
  EXPECT_EQ(m["n_win"].get<int64_t>(), tw.count());
  EXPECT_EQ(r.source_channels(), m["source"].get<std::vector<std::string>>());
  EXPECT_EQ(r.target_channels(), m["target"].get<std::vector<std::string>>());
  EXPECT_EQ(r.data_start(), m["data_start"].get<int64_t>());
  EXPECT_EQ(r.data_end(), m["data_end"].get<int64_t>());
  // Dropped: forcings, constants (also one only in constant_fields), a
  // variable without metadata, the excludes; skt only from the source.
  for (const char* gone : {"2d", "sdor", "lsm", "z", "insolation", "cos_latitude", "w_500", "tp", "tcw"}) {
    EXPECT_THAT(r.source_channels(), ::testing::Not(::testing::Contains(std::string(gone))));
    EXPECT_THAT(r.target_channels(), ::testing::Not(::testing::Contains(std::string(gone))));
  }
  EXPECT_THAT(r.source_channels(), ::testing::Not(::testing::Contains(std::string("skt"))));
  EXPECT_THAT(r.target_channels(), ::testing::Contains(std::string("skt")));
  EXPECT_EQ(r.target_channels().size(), r.source_channels().size() + 1);
  EXPECT_TRUE(std::is_sorted(r.source_index().begin(), r.source_index().end()));
  compare_windows(r, tw, m, out);
  // Spot checks of the rules the reference also applies.
  const PointSet p = r.source(tw.window(0));
  EXPECT_EQ(p.size(), 544u - 2u);  // two cells with a NaN coordinate
  EXPECT_EQ(p.lat[9], 85.0f);      // cell 11: 2·90 − 95 (cells 3 and 7 dropped before it)
  EXPECT_EQ(p.lon[12], -180.0f);   // cell 14: 540 → −180
  const auto sst =
      std::find(r.source_channels().begin(), r.source_channels().end(), "sst") - r.source_channels().begin();
  int nan = 0;
  for (size_t i = 0; i < p.size(); ++i) nan += std::isnan(p.data[i * size_t(p.num_channels) + size_t(sst)]);
  EXPECT_GT(nan, 0);  // NaN data stays NaN
}

TEST_F(AnemoiReaderTest, MultiDateWindowsAreTimeMajor) {
  testing_io::ScratchDir out("anemoi_12h");
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202001080000"), 12, 6);
  const nlohmann::json m =
      reference("o8.zarr", out, "--start 202001010000 --end 202001080000 --len-hrs 12 --step-hrs 6",
                "--source-exclude w_ skt tcw cp tp --target-exclude w_ tcw cp tp", {0, 1, 2, 3, 4, 5, 6, 7});
  const AnemoiReader r("ERA5", (dir / "o8.zarr").string(), kEra5Rules, tw);
  compare_windows(r, tw, m, out);
  const PointSet p = r.source(tw.window(0));
  ASSERT_EQ(p.size(), 2u * 542u);
  EXPECT_EQ(p.times.front(), tw.window(0).start);
  EXPECT_EQ(p.times.back(), tw.window(0).start + 6 * 3600);
  EXPECT_TRUE(std::is_sorted(p.times.begin(), p.times.end()));
}

TEST_F(AnemoiReaderTest, MisalignedWindowsAndFrequency) {
  testing_io::ScratchDir out("anemoi_misaligned");
  // Windows of 9 h every 6 h from 03:00: some would make upstream assert (§12.16).
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010300"), at("202001060000"), 9, 6);
  const nlohmann::json m =
      reference("o8.zarr", out, "--start 202001010300 --end 202001060000 --len-hrs 9 --step-hrs 6",
                "--source-exclude w_ skt tcw cp tp --target-exclude w_ tcw cp tp", {0, 1, 2, 3, 4, 6, 10});
  const AnemoiReader r("ERA5", (dir / "o8.zarr").string(), kEra5Rules, tw);
  compare_windows(r, tw, m, out);
  bool upstream_asserts = false;
  for (const auto& [k, info] : m["windows"].items()) upstream_asserts = upstream_asserts || info["upstream_asserts"];
  EXPECT_TRUE(upstream_asserts);

  testing_io::ScratchDir out2("anemoi_frequency");
  const TimeWindowHandler tw2 = TimeWindowHandler::from_hours(at("202001010000"), at("202001080000"), 12, 12);
  const nlohmann::json m2 = reference(
      "o8.zarr", out2, "--start 202001010000 --end 202001080000 --len-hrs 12 --step-hrs 12",
      "--frequency-hrs 12 --source-exclude w_ skt tcw cp tp --target-exclude w_ tcw cp tp", {0, 1, 2, 3, 5, 12, 13});
  const AnemoiReader r2("ERA5", (dir / "o8.zarr").string(), kEra5Rules, tw2, 12 * 3600);
  EXPECT_EQ(r2.period(), 12 * 3600);
  EXPECT_EQ(r2.source(tw2.window(1)).times.front(), tw2.window(1).start);
  EXPECT_EQ(r2.source(tw2.window(1)).size(), 542u);  // one date per 12 h window
  compare_windows(r2, tw2, m2, out2);
}

TEST_F(AnemoiReaderTest, NameToIndexAndSingularCoordinateNames) {
  testing_io::ScratchDir out("anemoi_n2i");
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202001020000"), 6, 6);
  const nlohmann::json m =
      reference("o8_n2i.zarr", out, "--start 202001010000 --end 202001020000 --len-hrs 6 --step-hrs 6",
                "--source t_ 2t msl --target-exclude q_", {0, 1, 2, 3});
  const AnemoiReader r("ERA5", (dir / "o8_n2i.zarr").string(), {Names{"t_", "2t", "msl"}, {}, {}, {"q_"}}, tw);
  EXPECT_EQ(r.source_channels(), (std::vector<std::string>{"2t", "msl", "t_850"}));
  EXPECT_EQ(r.target_channels(), m["target"].get<std::vector<std::string>>());
  compare_windows(r, tw, m, out);
}

TEST_F(AnemoiReaderTest, ConcurrentReadsEqualSequentialOnes) {
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202001100000"), 6, 6);
  const AnemoiReader r("ERA5", (dir / "o8.zarr").string(), kEra5Rules, tw);
  std::vector<PointSet> seq, par(8);
  for (int k = 0; k < 8; ++k) seq.push_back(r.target(tw.window(k == 5 ? 6 : k)));
  std::thread a([&] {
    for (int k = 0; k < 8; k += 2) par[size_t(k)] = r.target(tw.window(k == 5 ? 6 : k));
  });
  std::thread b([&] {
    for (int k = 1; k < 8; k += 2) par[size_t(k)] = r.target(tw.window(k == 5 ? 6 : k));
  });
  a.join();
  b.join();
  for (int k = 0; k < 8; ++k) EXPECT_TRUE(same_bits(par[size_t(k)].data, seq[size_t(k)].data)) << k;
}

// The period's data starts at its first store date; the store's own dates
// go further (the warning about a period reaching past the store compares
// with these: a start_date between two store dates is not "before the store").
TEST_F(AnemoiReaderTest, ThePeriodsDataAndTheStoresDatesDiffer) {
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001020100"), at("202001050000"), 6, 6);
  const AnemoiReader r("ERA5", (dir / "o8.zarr").string(), kEra5Rules, tw);
  EXPECT_EQ(r.data_start(), at("202001020600"));
  EXPECT_LT(r.store_first_date(), r.data_start());
  EXPECT_GT(r.store_last_date(), r.data_end());
}

TEST_F(AnemoiReaderTest, BadInputNamesStreamFileAndKey) {
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202001100000"), 6, 6);
  const std::string good = (dir / "o8.zarr").string();
  std::string e = reader_error([&] { AnemoiReader("ERA5", (dir / "nope.zarr").string(), kEra5Rules, tw); });
  EXPECT_THAT(e, HasSubstr("stream 'ERA5'"));
  EXPECT_THAT(e, HasSubstr("nope.zarr"));
  e = reader_error([&] { AnemoiReader("ERA5", good, {Names{"t_", "nothing_like_this"}, {}, {}, {}}, tw); });
  EXPECT_THAT(e, HasSubstr("source"));
  EXPECT_THAT(e, HasSubstr("'nothing_like_this' matches no selectable channel"));
  EXPECT_THAT(e, HasSubstr(good));
  e = reader_error([&] { AnemoiReader("ERA5", good, {Names{"lsm"}, {}, {}, {}}, tw); });  // a constant: not selectable
  EXPECT_THAT(e, HasSubstr("'lsm' matches no selectable channel"));
  e = reader_error([&] { AnemoiReader("ERA5", good, {{}, {}, Names{"t_"}, {"t_"}}, tw); });
  EXPECT_THAT(e, HasSubstr("target"));
  EXPECT_THAT(e, HasSubstr("leave no channel"));
  e = reader_error([&] { AnemoiReader("ERA5", good, {Names{}, {}, {}, {}}, tw); });  // none, as upstream
  EXPECT_THAT(e, HasSubstr("source"));
  EXPECT_THAT(e, HasSubstr("leave no channel"));
  const TimeWindowHandler later = TimeWindowHandler::from_hours(at("203001010000"), at("203002010000"), 6, 6);
  e = reader_error([&] { AnemoiReader("ERA5", good, kEra5Rules, later); });
  EXPECT_THAT(e, HasSubstr("dates"));
  EXPECT_THAT(e, HasSubstr("outside the store's dates"));
  // A store without variable names.
  const fs::path bad = dir / "nonames.zarr";
  fs::copy(dir / "o8_n2i.zarr", bad, fs::copy_options::recursive);
  nlohmann::json attrs = nlohmann::json::parse(std::ifstream(bad / ".zattrs"));
  attrs.erase("name_to_index");
  std::ofstream(bad / ".zattrs") << attrs.dump();
  e = reader_error([&] { AnemoiReader("ERA5", bad.string(), kEra5Rules, tw); });
  EXPECT_THAT(e, HasSubstr("variables"));
  EXPECT_THAT(e, HasSubstr("neither 'variables' nor 'name_to_index'"));
  // Zarr v3.
  const fs::path v3 = dir / "v3.zarr";
  fs::create_directories(v3);
  std::ofstream(v3 / "zarr.json") << R"({"zarr_format": 3, "node_type": "group"})";
  e = reader_error([&] { AnemoiReader("ERA5", v3.string(), kEra5Rules, tw); });
  EXPECT_THAT(e, HasSubstr("v3"));
  EXPECT_THAT(e, HasSubstr("stream 'ERA5'"));
}

// ---- synthetic -----------------------------------------------------------------

TEST(SyntheticReaderTest, DeterministicPerSeedStreamAndTime) {
  SyntheticOptions o;
  o.grid_lat = 6;
  o.grid_lon = 12;
  o.num_channels = 5;
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202002010000"), 12, 6);
  const SyntheticReader a("syn", o, {}, 7), b("syn", o, {}, 7), c("syn", o, {}, 8), d("other", o, {}, 7);
  const PointSet pa = a.source(tw.window(3));
  ASSERT_EQ(pa.size(), 2u * 72u);  // 12 h window, 6-hourly fields
  EXPECT_EQ(pa.num_channels, 5);
  EXPECT_TRUE(same_bits(pa.data, b.source(tw.window(3)).data));
  EXPECT_FALSE(same_bits(pa.data, c.source(tw.window(3)).data));
  EXPECT_FALSE(same_bits(pa.data, d.source(tw.window(3)).data));
  EXPECT_EQ(pa.times.front(), tw.window(3).start);
  EXPECT_EQ(pa.times.back(), tw.window(3).start + 6 * 3600);
  // The second date of window 3 is the first of window 4: the same field.
  const PointSet next = a.source(tw.window(4));
  EXPECT_TRUE(same_bits(std::vector<float>(pa.data.begin() + 72 * 5, pa.data.end()),
                        std::vector<float>(next.data.begin(), next.data.begin() + 72 * 5)));
  // Normalised: mean ≈ 0, stdev ≈ 1 per channel over many dates.
  double sum = 0, sq = 0;
  int64_t n = 0;
  for (int64_t k = 0; k < 40; ++k)
    for (float v : a.source(tw.window(k)).data) sum += v, sq += double(v) * v, ++n;
  EXPECT_NEAR(sum / double(n), 0.0, 0.25);
  EXPECT_NEAR(std::sqrt(sq / double(n)), 1.0, 0.35);
  // Rules apply to synthetic channel names too.
  const SyntheticReader sel("syn", o, {{}, {"synthetic_4"}, Names{"synthetic_1"}, {}}, 7);
  EXPECT_EQ(sel.source_channels().size(), 4u);
  EXPECT_EQ(sel.target_channels(), (std::vector<std::string>{"synthetic_1"}));
}

}  // namespace
}  // namespace wg
