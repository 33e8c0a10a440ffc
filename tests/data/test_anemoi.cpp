// anemoi streams on stores written by Python zarr (tests/data/make_anemoi_store.py),
// checked against an independent numpy implementation of the reading rules
// (tests/data/anemoi_reference.py): channels, windows, values, validity,
// centroids; then the Dataset's batches, the skip policy and bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "wg/data/anemoi.h"
#include "wg/data/dataset.h"
#include "wg/util/dates.h"

namespace wg {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) ADD_FAILURE() << "command failed (" << rc << "): " << cmd
                             << "\n(the fixtures need Debian's python3-zarr: run scripts/setup.sh)";
  return out;
}

std::string script(const char* name) { return std::string(WG_ANEMOI_SCRIPTS) + "/" + name; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

class Anemoi : public ::testing::Test {
 protected:
  static inline fs::path dir;
  static void SetUpTestSuite() {
    dir = fs::path(::testing::TempDir()) / ("wg_anemoi_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    run(std::string(WG_PYTHON3) + " " + script("make_anemoi_store.py") + " " + (dir / "good.zarr").string() +
        " --dates 120 --lat 8 --lon 16 --missing 13 > /dev/null");
    run(std::string(WG_PYTHON3) + " " + script("make_anemoi_store.py") + " " + (dir / "torn.zarr").string() +
        " --dates 120 --lat 8 --lon 16 --missing 13 --corrupt-chunk 20 21 > /dev/null");
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }

  static StreamConfig stream(const std::string& store = "good.zarr") {
    StreamConfig s;
    s.name = "ERA5";
    s.type = "anemoi";
    s.filenames = {store};
    s.token_size = 8;
    s.source_exclude = {"tp"};
    s.target_exclude = {"q_"};
    return s;
  }
  static Config config(const std::string& store = "good.zarr") {
    Config c;
    c.streams = {stream(store)};
    c.data_path = dir.string();
    c.start_date = *parse_yyyymmddhhmm("202001010000");
    c.end_date = *parse_yyyymmddhhmm("202001200000");
    c.start_date_val = *parse_yyyymmddhhmm("202001250000");
    c.end_date_val = *parse_yyyymmddhhmm("202001300000");
    c.len_hrs = 12;
    c.step_hrs = 6;
    c.batch_size_per_gpu = 2;
    c.samples_per_mini_epoch = 40;
    c.num_mini_epochs = 2;
    return c;
  }
  // Start (seconds) of training window k of config().
  static int64_t start_of(int64_t k) { return *parse_yyyymmddhhmm("202001010000") + k * 6 * 3600; }
  static nlohmann::json reference(const std::vector<int64_t>& windows) {
    std::string w;
    for (auto k : windows) w += " " + std::to_string(k);
    return nlohmann::json::parse(run(std::string(WG_PYTHON3) + " " + script("anemoi_reference.py") + " " +
                                     (dir / "good.zarr").string() +
                                     " --token-size 8 --start 202001010000 --end 202001200000 --len-hrs 12"
                                     " --step-hrs 6 --source-exclude tp --target-exclude q_ --windows" + w));
  }
};

TEST_F(Anemoi, ChannelsFollowTheRulesAndDropForcingsAndConstants) {
  const Config c = config();
  AnemoiStream a(c.streams[0], c);
  const auto ref = reference({});
  EXPECT_EQ(a.channels(), ref["channels"].get<std::vector<std::string>>());
  EXPECT_EQ(std::vector<int>(a.is_source().begin(), a.is_source().end()), ref["is_source"].get<std::vector<int>>());
  // tp: target only; q_850: source only; forcings and constants gone.
  const auto& ch = a.channels();
  const auto at = [&](const std::string& n) { return std::find(ch.begin(), ch.end(), n) - ch.begin(); };
  ASSERT_LT(size_t(at("tp")), ch.size());
  EXPECT_EQ(a.is_source()[size_t(at("tp"))], 0);
  ASSERT_LT(size_t(at("q_850")), ch.size());
  EXPECT_EQ(a.is_source()[size_t(at("q_850"))], 1);
  for (const char* dropped : {"cos_latitude", "insolation", "lsm"}) EXPECT_EQ(size_t(at(dropped)), ch.size()) << dropped;
  const StreamShape shape = Dataset(c, 0, 1).stream_shapes()[0];  // what the model is built for
  EXPECT_EQ(shape.num_channels, int(ch.size()));
  EXPECT_EQ(shape.channels, ch);
}

TEST_F(Anemoi, WindowsSkipMissingDatesAsTheReferenceDoes) {
  const Config c = config();
  AnemoiStream a(c.streams[0], c);
  const auto want = reference({})["windows"].get<std::vector<int64_t>>();
  std::vector<int64_t> got;
  for (int64_t k = 0; k < TimeWindows::training(c).count(); ++k)
    if (a.has_window(start_of(k))) got.push_back(k);
  EXPECT_EQ(got, want);
  // date 13 (2020-01-04T06) is missing: windows 12 (06 + 12 h covers 00 and 06) and 13 are out.
  EXPECT_EQ(std::count(got.begin(), got.end(), 12), 0);
  EXPECT_EQ(std::count(got.begin(), got.end(), 13), 0);
  EXPECT_EQ(std::count(got.begin(), got.end(), 11), 1);
  EXPECT_EQ(Dataset(c, 0, 1).windows(), int64_t(want.size()));
}

TEST_F(Anemoi, SamplesEqualTheReferenceValuesValidityAndCentroids) {
  const Config c = config();
  AnemoiStream a(c.streams[0], c);
  const std::vector<int64_t> ks = {0, 7, 14, 71};
  const auto ref = reference(ks);
  EXPECT_EQ(a.tokens(), ref["tokens"].get<int>());
  for (int64_t k : ks) {
    std::vector<float> v, cen;
    std::vector<uint8_t> ok;
    a.sample(start_of(k), v, ok, cen);
    const auto& r = ref["samples"][std::to_string(k)];
    const auto rv = r["values"].get<std::vector<float>>();
    const auto rok = r["valid"].get<std::vector<int>>();
    const auto rc = r["centroids"].get<std::vector<double>>();
    ASSERT_EQ(v.size(), rv.size()) << k;
    ASSERT_EQ(ok.size(), rok.size()) << k;
    ASSERT_EQ(cen.size(), rc.size()) << k;
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], rv[i]) << "window " << k << " value " << i;
    for (size_t i = 0; i < ok.size(); ++i) ASSERT_EQ(int(ok[i]), rok[i]) << "window " << k << " valid " << i;
    for (size_t i = 0; i < cen.size(); ++i) ASSERT_NEAR(cen[i], rc[i], 1e-6) << "window " << k << " centroid " << i;
    // sst is NaN over land: some values are invalid, and they are 0.
    EXPECT_LT(std::count(ok.begin(), ok.end(), 1), std::ptrdiff_t(ok.size())) << k;
  }
}

TEST_F(Anemoi, BatchesShardDisjointWindowsAndHideNonSourceChannels) {
  const Config c = config();
  Dataset r0(c, 0, 2), r1(c, 1, 2);
  AnemoiStream a(c.streams[0], c);
  const auto& src = a.is_source();
  std::set<int64_t> seen;
  for (int64_t step = 0; step < r0.steps_per_epoch(); ++step) {
    for (const Dataset* d : {&r0, &r1}) {
      const Batch b = d->batch(step);
      ASSERT_EQ(b.windows.size(), b.sample_ids.size());
      for (int64_t w : b.windows) {
        EXPECT_TRUE(a.has_window(w));
        EXPECT_TRUE(seen.insert(w).second) << "window " << w << " read twice in one mini-epoch";
      }
      const StreamBatch& sb = b.streams[0];
      ASSERT_EQ(sb.valid.size(), sb.values.size());
      const size_t per_token = size_t(sb.token_size * sb.channels), per_sample = size_t(sb.tokens) * per_token;
      for (size_t n = 0; n < b.windows.size(); ++n) {
        std::vector<float> truth, cen;
        std::vector<uint8_t> ok;
        a.sample(b.windows[n], truth, ok, cen);
        for (size_t t = 0; t < size_t(sb.tokens); ++t)
          for (size_t p = 0; p < per_token; ++p) {
            const size_t i = n * per_sample + t * per_token + p, ch = p % size_t(sb.channels);
            const bool masked = sb.masked[n * size_t(sb.tokens) + t];
            // visible: the source channels only; masked: every value, as the store has it
            const float want = (masked || src[ch]) ? truth[i - n * per_sample] : 0.0f;
            ASSERT_EQ(sb.values[i], want) << "sample " << n << " token " << t << (masked ? " (masked)" : " (visible)");
            ASSERT_EQ(sb.valid[i], ok[i - n * per_sample]);
          }
      }
    }
  }
  // Deterministic: the same step gives the same windows.
  EXPECT_EQ(Dataset(c, 0, 2).batch(3).windows, r0.batch(3).windows);
}

TEST_F(Anemoi, CorruptChunkInTrainingSkipsTheSampleAndCountsIt) {
  const Config c = config("torn.zarr");
  Dataset d(c, 0, 1);
  AnemoiStream a(c.streams[0], c);
  int64_t windows = 0;
  for (int64_t step = 0; step < d.total_steps(); ++step) {
    const Batch b = d.batch(step);  // never throws: damaged windows are replaced
    for (int64_t w : b.windows) {
      // windows 19..21 touch dates 20 and 21 (12 h windows from 00, 06): none may be used
      EXPECT_TRUE(w < start_of(19) || w > start_of(21)) << "window at " << iso_date(w) << " reads a corrupt chunk";
      ++windows;
    }
  }
  EXPECT_GT(windows, 0);
  EXPECT_GE(d.skipped_samples(), 1);
  // Reading the window directly names store, chunk and date.
  std::vector<float> v, cen;
  std::vector<uint8_t> ok;
  try {
    a.sample(start_of(20), v, ok, cen);
    FAIL() << "no error for a truncated chunk";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("torn.zarr"));
    EXPECT_THAT(e.what(), HasSubstr("20.0.0.0"));
    EXPECT_THAT(e.what(), HasSubstr("2020-01-06T00:00"));
  }
  EXPECT_TRUE(v.empty() && ok.empty() && cen.empty()) << "a failed read appends nothing";
}

TEST_F(Anemoi, ValidationBatchesComeFromTheValidationPeriod) {
  Config c = config();
  c.samples_per_validation = 8;  // 2 ranks x batch 2: 2 validation batches per rank
  const Dataset r0(c, 0, 2), r1(c, 1, 2);
  ASSERT_EQ(r0.validation_steps(), 2);
  std::set<int64_t> windows, ids;
  for (const Dataset* d : {&r0, &r1})
    for (int64_t i = 0; i < d->validation_steps(); ++i) {
      const Batch b = d->validation_batch(i);
      for (int64_t w : b.windows) {
        EXPECT_GE(w, c.start_date_val);
        EXPECT_LE(w, c.end_date_val);
        windows.insert(w);
      }
      ids.insert(b.sample_ids.begin(), b.sample_ids.end());
      EXPECT_EQ(b.windows, d->validation_batch(i).windows) << "deterministic";
    }
  EXPECT_EQ(windows.size(), 8u) << "the ranks' validation samples are disjoint";
  EXPECT_EQ(ids.size(), 8u);
  // Enabled, a validation period outside the data is an error; off, it is not looked at.
  c.end_date_val = *parse_yyyymmddhhmm("202002150000");
  EXPECT_THAT(error_of([&] { Dataset(c, 0, 1); }), HasSubstr("validation period"));
  c.samples_per_validation = 0;
  EXPECT_EQ(Dataset(c, 0, 1).validation_steps(), 0);
}

TEST_F(Anemoi, LoaderThreadsReadTheSameBatchesAsOneThread) {
  const Config c = config("torn.zarr");
  const Dataset serial(c, 0, 1), shared(c, 0, 1);
  std::vector<Batch> want, got(size_t(serial.total_steps()));
  for (int64_t s = 0; s < serial.total_steps(); ++s) want.push_back(serial.batch(s));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t s = t; s < shared.total_steps(); s += 4) got[size_t(s)] = shared.batch(s);
    });
  for (auto& t : threads) t.join();
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_EQ(got[s].windows, want[s].windows) << "step " << s;
    EXPECT_EQ(got[s].streams[0].values, want[s].streams[0].values) << "step " << s;
    EXPECT_EQ(got[s].streams[0].valid, want[s].streams[0].valid) << "step " << s;
  }
  EXPECT_EQ(shared.skipped_samples(), serial.skipped_samples());
}

TEST_F(Anemoi, AllWindowsUnreadableIsOneClearError) {
  Config c = config("torn.zarr");
  c.start_date = *parse_yyyymmddhhmm("202001060000");  // windows 0, 1: dates 20, 21 (both torn)
  c.end_date = *parse_yyyymmddhhmm("202001060600");
  c.samples_per_mini_epoch = 2;
  c.batch_size_per_gpu = 1;
  Dataset d(c, 0, 1);
  EXPECT_EQ(d.windows(), 2);
  try {
    d.batch(0);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("could not be read"));
  }
}

TEST_F(Anemoi, BadInputNamesWhatIsWrong) {
  Config c = config();
  auto with = [&](auto change) {
    Config x = c;
    change(x);
    return error_of([&] { Dataset(x, 0, 1); });
  };
  EXPECT_THAT(with([](Config& x) { x.streams[0].filenames = {"nope.zarr"}; }), HasSubstr("nope.zarr"));
  EXPECT_THAT(with([](Config& x) { x.data_path.clear(); }), HasSubstr("no data root is set"));
  EXPECT_THAT(with([](Config& x) { x.streams[0].source = {"no_such_var"}; }),
              HasSubstr("source entry 'no_such_var' matches no variable"));
  EXPECT_THAT(with([](Config& x) { x.start_date = *parse_yyyymmddhhmm("201912310000"); }),
              HasSubstr("before the store's first date 2020-01-01T00:00"));
  EXPECT_THAT(with([](Config& x) { x.end_date = *parse_yyyymmddhhmm("202003010000"); }),
              HasSubstr("after the store's last date 2020-01-30T18:00"));
  EXPECT_THAT(with([](Config& x) { x.len_hrs = 9; }), HasSubstr("multiples of the store's frequency"));
  EXPECT_THAT(with([](Config& x) { x.streams[0].source_exclude = {""}; x.streams[0].target_exclude = {""}; }),
              HasSubstr("no source channel"));
  // A Zarr v3 store.
  fs::create_directories(dir / "v3.zarr");
  std::ofstream(dir / "v3.zarr" / "zarr.json") << R"({"zarr_format": 3, "node_type": "group"})";
  EXPECT_THAT(with([](Config& x) { x.streams[0].filenames = {"v3.zarr"}; }), HasSubstr("Zarr v3"));
  // An array of a dtype the reader does not take.
  fs::copy(dir / "good.zarr", dir / "f2.zarr", fs::copy_options::recursive);
  {
    std::ifstream in(dir / "f2.zarr" / "mean" / ".zarray");
    std::string meta((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    meta.replace(meta.find("<f8"), 3, "<f2");
    std::ofstream(dir / "f2.zarr" / "mean" / ".zarray") << meta;
  }
  const std::string f2 = with([](Config& x) { x.streams[0].filenames = {"f2.zarr"}; });
  EXPECT_THAT(f2, HasSubstr("stream 'ERA5'"));
  EXPECT_THAT(f2, HasSubstr("f2.zarr/mean"));
  EXPECT_THAT(f2, HasSubstr("<f2"));
  // A store without its statistics.
  fs::copy(dir / "good.zarr", dir / "nostats.zarr", fs::copy_options::recursive);
  fs::remove_all(dir / "nostats.zarr" / "stdev");
  EXPECT_THAT(with([](Config& x) { x.streams[0].filenames = {"nostats.zarr"}; }), HasSubstr("no array 'stdev'"));
}

}  // namespace
}  // namespace wg
