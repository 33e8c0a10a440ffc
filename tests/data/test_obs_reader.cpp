// The obs reader on SYNOP-like (G = 0, some NaN values and coordinates) and
// NPP-ATMS-like (22 brightness-temperature channels, 4 geoinfos, an hourly
// index with another base, an index ending before the data) fixture stores
// (make_obs_store.py), checked bit for bit against readers_reference.py
// (rows by date, channels, geoinfos, normalisation); the rows upstream
// loses (§12.15); an empty window spoofed with loss weight 0; bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "reader_fixtures.h"
#include "wg/data/healpix.h"
#include "wg/data/obs_reader.h"
#include "wg/util/dates.h"

namespace wg {
namespace {

using namespace reader_testing;
using ::testing::HasSubstr;
using Names = std::vector<std::string>;  // an include list of ChannelRules

class ObsReaderTest : public ::testing::Test {
 protected:
  static inline fs::path dir;
  static void SetUpTestSuite() {
    dir = fs::path(::testing::TempDir()) / ("wg_obs_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    make_store("make_obs_store.py", dir / "synop.zarr", "--kind synop --hours 96 --gap 30 42");
    make_store("make_obs_store.py", dir / "atms.zarr",
               "--kind atms --hours 96 --base 2020-01-01T00:00:00 --gap 48 61 --index-short 5 --chunk-rows 500");
    make_store("make_obs_store.py", dir / "nolatlon.zarr", "--kind synop --hours 12 --no-latlon");
    make_store("make_obs_store.py", dir / "noindex.zarr", "--kind synop --hours 12 --no-index");
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }

  static nlohmann::json reference(const std::string& store, const fs::path& out, const std::string& args,
                                  int64_t num_windows) {
    std::string w;
    for (int64_t k = 0; k < num_windows; ++k) w += " " + std::to_string(k);
    run_readers_reference("obs " + (dir / store).string() + " " + out.string() + " " + args + " --windows" + w);
    std::ifstream f(out / "manifest.json");
    return nlohmann::json::parse(f);
  }

  static void compare_windows(const ObsReader& r, const TimeWindowHandler& tw, const nlohmann::json& m,
                              const fs::path& out) {
    for (const auto& [key, info] : m["windows"].items()) {
      SCOPED_TRACE("window " + key);
      const TimeWindow w = tw.window(std::stoll(key));
      ASSERT_EQ(w.start, info["start"].get<int64_t>());
      const std::string p = (out / ("w" + key + "_")).string();
      EXPECT_TRUE(same_bits(r.window_rows(w), npy::read<int64_t>(p + "rows.npy")));
      const auto [lo, hi] = r.row_range(w);
      const std::vector<int64_t> rows = r.window_rows(w);
      if (!rows.empty()) {
        EXPECT_LE(lo, rows.front());
        EXPECT_GT(hi, rows.back());
      }
      PointSet src, tgt;
      r.read(w, &src, &tgt);
      EXPECT_EQ(src.num_geoinfos, r.num_geoinfos());
      EXPECT_EQ(src.num_channels, int(r.source_channels().size()));
      EXPECT_EQ(tgt.num_channels, int(r.target_channels().size()));
      EXPECT_TRUE(same_bits(src.lat, npy::read<float>(p + "lat.npy")));
      EXPECT_TRUE(same_bits(src.lon, npy::read<float>(p + "lon.npy")));
      EXPECT_TRUE(same_bits(src.times, npy::read<int64_t>(p + "times.npy")));
      EXPECT_TRUE(same_values(src.geoinfos, npy::read<float>(p + "geo.npy"), std::max(1, src.num_geoinfos)));
      EXPECT_TRUE(same_values(src.data, npy::read<float>(p + "src.npy"), src.num_channels));
      EXPECT_TRUE(same_values(tgt.data, npy::read<float>(p + "tgt.npy"), tgt.num_channels));
      EXPECT_EQ(tgt.geoinfos, src.geoinfos);
    }
  }
};

TEST_F(ObsReaderTest, SynopRowsChannelsAndNormalisationMatchTheReference) {
  testing_io::ScratchDir out("obs_synop");
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202001050000"), 6, 6);
  const nlohmann::json m = reference("synop.zarr", out,
                                     "--start 202001010000 --end 202001050000 --len-hrs 6 --step-hrs 6 "
                                     "--source obsvalue --source-exclude rh2m",
                                     tw.count() + 2);
  const ObsReader r("SYNOP", (dir / "synop.zarr").string(), {Names{"obsvalue"}, {"rh2m"}, {}, {}});
  EXPECT_EQ(r.index_array(), "idx_197001010000_1");
  EXPECT_EQ(r.num_geoinfos(), 0);  // errata 2: the first obsvalue column follows lon
  EXPECT_EQ(r.source_channels(), m["source"].get<std::vector<std::string>>());
  EXPECT_EQ(r.target_channels(), m["target"].get<std::vector<std::string>>());
  // §12.15: upstream would keep rh2m (excludes ignored once includes are given).
  EXPECT_THAT(r.source_channels(), ::testing::Not(::testing::Contains(std::string("obsvalue_rh2m_0"))));
  EXPECT_THAT(m["upstream_source"].get<std::vector<std::string>>(),
              ::testing::Contains(std::string("obsvalue_rh2m_0")));
  EXPECT_THAT(r.target_channels(), ::testing::Not(::testing::Contains(std::string("sin_julian_day"))));
  compare_windows(r, tw, m, out);
  // NaN data stays NaN; NaN-coordinate rows are left out.
  const PointSet t = r.target(tw.window(1));
  EXPECT_LT(t.size(), r.window_rows(tw.window(1)).size());
  EXPECT_TRUE(std::any_of(t.data.begin(), t.data.end(), [](float v) { return std::isnan(v); }));
}

TEST_F(ObsReaderTest, FixedRowRangesKeepTheRowsUpstreamLoses) {
  testing_io::ScratchDir out("obs_upstream");
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202001050000"), 6, 6);
  const nlohmann::json m =
      reference("synop.zarr", out, "--start 202001010000 --end 202001050000 --len-hrs 6 --step-hrs 6", tw.count());
  const ObsReader r("SYNOP", (dir / "synop.zarr").string(), {});
  int64_t lost = 0;
  for (const auto& [key, info] : m["windows"].items()) {
    const int64_t rows = int64_t(r.window_rows(tw.window(std::stoll(key))).size());
    EXPECT_EQ(rows, info["rows"].get<int64_t>()) << key;
    if (info.contains("upstream_rows")) {
      EXPECT_LE(info["upstream_rows"].get<int64_t>(), rows) << key;
      lost += rows - info["upstream_rows"].get<int64_t>();
    }
  }
  EXPECT_EQ(m["windows"]["0"]["upstream_rows"].get<int64_t>(), 0);  // starts[−1]: window 0 reads nothing
  EXPECT_GT(r.window_rows(tw.window(0)).size(), 0u);
  EXPECT_GT(lost, int64_t(tw.count()));  // and every later window loses its last row
}

TEST_F(ObsReaderTest, AtmsGeoinfosOtherBaseAndShortIndex) {
  testing_io::ScratchDir out("obs_atms");
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202001050000"), 6, 6);
  const nlohmann::json m = reference("atms.zarr", out,
                                     "--base 202001010000 --start 202001010000 --end 202001050000 --len-hrs 6 "
                                     "--step-hrs 6 --source rawbt_1 rawbt_2 rawbt_3 --target-exclude rawbt_22",
                                     tw.count());
  const ObsReader r("NPP-ATMS", (dir / "atms.zarr").string(),
                    {Names{"rawbt_1", "rawbt_2", "rawbt_3"}, {}, {}, {"rawbt_22"}}, at("202001010000"));
  EXPECT_EQ(r.index_array(), "idx_202001010000_1");
  EXPECT_EQ(r.channels().geoinfos, m["geoinfos"].get<std::vector<std::string>>());
  EXPECT_EQ(r.num_geoinfos(), 4);
  EXPECT_EQ(r.source_channels(), m["source"].get<std::vector<std::string>>());
  EXPECT_EQ(r.source_channels().size(), 16u);  // substrings: rawbt_1, _10 … _19, _2, _20 … _22, _3
  EXPECT_EQ(r.target_channels().size(), 21u);
  compare_windows(r, tw, m, out);
  EXPECT_TRUE(r.source(tw.window(8)).empty());                // [48 h, 54 h): the gap
  EXPECT_FALSE(r.source(tw.window(tw.count() - 1)).empty());  // past the index's end: read by dates
}

TEST_F(ObsReaderTest, EmptyWindowIsSpoofedWithLossWeightZero) {
  const TimeWindowHandler tw = TimeWindowHandler::from_hours(at("202001010000"), at("202001050000"), 6, 6);
  const ObsReader r("SYNOP", (dir / "synop.zarr").string(), {});
  PointSet src, tgt;
  r.read(tw.window(5), &src, &tgt);  // [30 h, 36 h) has no observation
  ASSERT_TRUE(src.empty());
  ASSERT_TRUE(tgt.empty());
  EXPECT_EQ(tgt.num_channels, 5);
  const HealpixGrid grid(2);
  StreamTokenConfig cfg;
  cfg.name = "SYNOP";
  const SpoofMeans means = r.spoof_means();
  ASSERT_EQ(means.target, r.channels().target_mean);
  const StreamSample s = build_masking_sample(grid, cfg, MaskingConfig{}, MaskStrategy::Random, src, tgt,
                                              tw.window(5).start, means, {1, 0, 5, 0});
  EXPECT_TRUE(s.source_is_spoof);
  EXPECT_TRUE(s.target_is_spoof);  // the loss weight of this stream is 0
  ASSERT_GT(s.targets[0].num_points(), 0);
  for (int64_t p = 0; p < s.targets[0].num_points(); ++p)
    for (int c = 0; c < 5; ++c)
      EXPECT_EQ(s.targets[0].values[size_t(p * 5 + c)], static_cast<float>(means.target[size_t(c)]));
}

TEST_F(ObsReaderTest, BadInputNamesStreamFileAndKey) {
  const std::string nolatlon = (dir / "nolatlon.zarr").string(), noindex = (dir / "noindex.zarr").string();
  std::string e = reader_error([&] { ObsReader("SYNOP", nolatlon, {}); });
  EXPECT_THAT(e, HasSubstr("stream 'SYNOP'"));
  EXPECT_THAT(e, HasSubstr(nolatlon));
  EXPECT_THAT(e, HasSubstr("colnames"));
  EXPECT_THAT(e, HasSubstr("no column 'lat'"));
  e = reader_error([&] { ObsReader("SYNOP", noindex, {}); });
  EXPECT_THAT(e, HasSubstr(noindex));
  EXPECT_THAT(e, HasSubstr("idx_197001010000_1"));
  EXPECT_THAT(e, HasSubstr("no idx_* array at all"));
  e = reader_error([&] { ObsReader("NPP-ATMS", (dir / "atms.zarr").string(), {}); });  // default base 1970
  EXPECT_THAT(e, HasSubstr("it has: idx_202001010000_1; set base_datetime"));
  e = reader_error([&] { ObsReader("SYNOP", (dir / "synop.zarr").string(), {Names{"t2m", "rawbt"}, {}, {}, {}}); });
  EXPECT_THAT(e, HasSubstr("source"));
  EXPECT_THAT(e, HasSubstr("'rawbt' matches no selectable channel"));
  e = reader_error([&] { ObsReader("SYNOP", (dir / "synop.zarr").string(), {{}, {"obsvalue"}, {}, {}}); });
  EXPECT_THAT(e, HasSubstr("source"));
  EXPECT_THAT(e, HasSubstr("leave no obsvalue column"));  // upstream: an empty, spoofed stream
  e = reader_error([&] { ObsReader("SYNOP", (dir / "synop.zarr").string(), {{}, {}, Names{}, {}}); });
  EXPECT_THAT(e, HasSubstr("target"));
  EXPECT_THAT(e, HasSubstr("leave no obsvalue column"));  // `target: []` selects none
  e = reader_error([&] { ObsReader("SYNOP", (dir / "missing.zarr").string(), {}); });
  EXPECT_THAT(e, HasSubstr("missing.zarr"));
  EXPECT_THAT(e, HasSubstr("stream 'SYNOP'"));
  // Statistics that cannot normalise.
  const fs::path bad = dir / "zerovar.zarr";
  fs::copy(dir / "nolatlon.zarr", bad, fs::copy_options::recursive);
  nlohmann::json attrs = nlohmann::json::parse(std::ifstream(bad / "data" / ".zattrs"));
  attrs["colnames"][0] = "lat";
  attrs["colnames"][1] = "lon";
  attrs["vars"][3] = 0.0;
  std::ofstream(bad / "data" / ".zattrs") << attrs.dump();
  e = reader_error([&] { ObsReader("SYNOP", bad.string(), {}); });
  EXPECT_THAT(e, HasSubstr("obsvalue_ps_0"));
  EXPECT_THAT(e, HasSubstr("cannot normalise"));
  // zarr-python writes a column's NaN statistics as a bare NaN (json.dumps):
  // the store opens, and a selected channel's NaN mean is that channel's error.
  const fs::path nan = dir / "nanstats.zarr";
  fs::copy(dir / "nolatlon.zarr", nan, fs::copy_options::recursive);
  attrs = nlohmann::json::parse(std::ifstream(nan / "data" / ".zattrs"));
  attrs["colnames"][0] = "lat";
  attrs["colnames"][1] = "lon";
  attrs["means"][3] = 123456.5;  // a placeholder written as NaN below
  std::string text = attrs.dump();
  text.replace(text.find("123456.5"), 8, "NaN");
  std::ofstream(nan / "data" / ".zattrs") << text;
  e = reader_error([&] { ObsReader("SYNOP", nan.string(), {}); });
  EXPECT_THAT(e, HasSubstr("obsvalue_ps_0"));
  EXPECT_THAT(e, HasSubstr("cannot normalise"));
  EXPECT_THAT(e, ::testing::Not(HasSubstr("cannot be read")));
}

}  // namespace
}  // namespace wg
