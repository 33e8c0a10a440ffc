// The Zarr v2 reader against real Python zarr. tests/io/make_zarr_zoo.py is
// run once (with Debian's /usr/bin/python3) into a temporary directory; it
// writes zoo.zarr (every dtype, codec, separator and fill case), the bytes
// Python zarr reads back for each array (expected/<name>.bin), and bad.zarr
// (arrays the reader must reject). Whole arrays and sub-boxes must match
// Python byte for byte (NaNs included); bad stores and corrupt chunks must
// give a ZarrError naming what is wrong, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "wg/io/zarr.h"
#include "file_bytes.h"

namespace wg::zarr {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using json = nlohmann::json;
using Shape = std::vector<int64_t>;

using wg::io_testing::read_bytes;
using wg::io_testing::write_bytes;

// The fixture stores, written once per test program.
struct Zoo {
  fs::path dir;
  std::string error;  // non-empty when the script failed
  json index;

  Zoo() : dir(fs::temp_directory_path() / ("wg_zarr_" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path log = dir / "make_zarr_zoo.log";
    const std::string cmd = std::string(WG_PYTHON3) + " '" + WG_ZARR_ZOO_SCRIPT + "' '" + dir.string() + "' > '" +
                            log.string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : rc;
      error = "could not write the Zarr test fixtures (exit status " + std::to_string(code) + "): " + cmd +
              "\nRun scripts/setup.sh: it installs python3-zarr and python3-numcodecs for " WG_PYTHON3 ".\n" +
              "--- output ---\n" + read_bytes(log);
      return;
    }
    index = json::parse(read_bytes(dir / "expected" / "index.json"));
  }
  ~Zoo() { fs::remove_all(dir); }

  fs::path store() const { return dir / "zoo.zarr"; }
  fs::path bad() const { return dir / "bad.zarr"; }
  std::string expected(const std::string& name) const { return read_bytes(dir / "expected" / (name + ".bin")); }
};

const Zoo& zoo() {
  static const Zoo z;
  return z;
}

class ZarrZoo : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!zoo().error.empty()) FAIL() << zoo().error;
  }
  Group group() const { return Group::open(zoo().store().string()); }

  // A fresh store for this test holding copies of the zoo's arrays `names`.
  fs::path scratch_store(const std::vector<std::string>& names) const {
    const fs::path s = zoo().dir / "scratch" / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(s);
    fs::create_directories(s);
    fs::copy_file(zoo().store() / ".zgroup", s / ".zgroup");
    for (const std::string& n : names) fs::copy(zoo().store() / n, s / n, fs::copy_options::recursive);
    return s;
  }
};

class ZarrBadInput : public ZarrZoo {};
class ZarrCorrupt : public ZarrZoo {};

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}

// The box [start, start+count) of a C-order array, element by element.
std::string slice(const std::string& all, const Shape& shape, const Shape& start, const Shape& count, size_t isz) {
  std::string out;
  Shape i(shape.size(), 0);
  for (int64_t e = 0; e < numel(count); ++e) {
    int64_t lin = 0;
    for (size_t d = 0; d < shape.size(); ++d) lin = lin * shape[d] + start[d] + i[d];
    out.append(all, static_cast<size_t>(lin) * isz, isz);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++i[d] < count[d]) break;
      i[d] = 0;
    }
  }
  return out;
}

std::string read_box(const Array& a, const Shape& start, const Shape& count) {
  std::string out(static_cast<size_t>(numel(count) * a.meta().itemsize), '\0');
  a.read(start, count, out.data());
  return out;
}

std::string read_whole(const Array& a) { return read_box(a, Shape(a.meta().shape.size(), 0), a.meta().shape); }

// Runs f and returns the ZarrError's message ("" and a test failure if none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ZarrError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ZarrError";
  return "";
}

// ---- Python zarr parity --------------------------------------------------------

TEST_F(ZarrZoo, GroupListsArraysAndAttributes) {
  const Group g = group();
  std::vector<std::string> names;
  for (const auto& [name, _] : zoo().index.items()) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(g.arrays(), names);
  EXPECT_TRUE(g.has_array("data"));
  EXPECT_FALSE(g.has_array("nope"));
  EXPECT_EQ(g.attrs().at("variables").size(), 5u);
  EXPECT_EQ(g.attrs().at("frequency"), "6h");
  EXPECT_EQ(Group::open(zoo().store().string() + "/").path(), zoo().store().string());
}

TEST_F(ZarrZoo, MetadataMatchesPython) {
  const Group g = group();
  for (const auto& [name, info] : zoo().index.items()) {
    SCOPED_TRACE(name);
    const Array a = g.array(name);
    EXPECT_EQ(a.meta().dtype_str, info.at("dtype").get<std::string>());
    EXPECT_EQ(a.meta().shape, info.at("shape").get<Shape>());
    EXPECT_EQ(a.meta().chunks, info.at("chunks").get<Shape>());
    EXPECT_EQ(a.path(), zoo().store().string() + "/" + name);
    EXPECT_EQ(a.name(), name);
  }
  const Array data = g.array("data");
  const ArrayMeta& d = data.meta();
  EXPECT_EQ(d.dtype, DType::F4);
  EXPECT_EQ(d.compressor, "blosc");
  EXPECT_EQ(d.chunk_elements(), 5 * 40);
  float fill;
  std::memcpy(&fill, d.fill.data(), 4);
  EXPECT_TRUE(std::isnan(fill));
  EXPECT_EQ(g.array("f8_slash_2d").meta().separator, '/');
  EXPECT_EQ(g.array("f8_slash_2d").chunk_key({1, 2}), "1/2");
  EXPECT_EQ(g.array("f4_raw_4d").meta().compressor, "");
  EXPECT_EQ(g.array("f4_raw_4d").chunk_key({2, 1, 1, 0}), "2.1.1.0");
  EXPECT_EQ(g.array("f4_fill_null").meta().fill, std::vector<uint8_t>(4, 0));
}

TEST_F(ZarrZoo, WholeArraysMatchPythonBytes) {
  const Group g = group();
  for (const auto& [name, info] : zoo().index.items()) {
    SCOPED_TRACE(name);
    const std::string want = zoo().expected(name);
    for (size_t cache : {0, 4}) {
      const Array a = g.array(name, cache);
      for (int pass = 0; pass < 2; ++pass) {  // the second pass hits the cache
        const std::string got = read_whole(a);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << "cache " << cache << " pass " << pass;
      }
    }
  }
}

TEST_F(ZarrZoo, SubBoxesMatchPythonSlices) {
  const Group g = group();
  std::mt19937 rng(7);
  for (const auto& [name, info] : zoo().index.items()) {
    SCOPED_TRACE(name);
    const Array a = g.array(name, 2);
    const Shape& shape = a.meta().shape;
    const Shape& chunks = a.meta().chunks;
    const size_t isz = static_cast<size_t>(a.meta().itemsize);
    const std::string all = zoo().expected(name);
    // A box straddling the first chunk corner in every dimension.
    Shape start(shape.size()), count(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      start[d] = std::max<int64_t>(0, std::min(chunks[d], shape[d]) - 1);
      count[d] = std::min<int64_t>(2, shape[d] - start[d]);
    }
    EXPECT_EQ(read_box(a, start, count), slice(all, shape, start, count, isz));
    for (int k = 0; k < 25; ++k) {
      for (size_t d = 0; d < shape.size(); ++d) {
        start[d] = std::uniform_int_distribution<int64_t>(0, shape[d] - 1)(rng);
        count[d] = std::uniform_int_distribution<int64_t>(1, shape[d] - start[d])(rng);
      }
      EXPECT_EQ(read_box(a, start, count), slice(all, shape, start, count, isz)) << "box " << k;
    }
  }
}

TEST_F(ZarrZoo, OneDateOfDataIsOneChunk) {
  const Array a = group().array("data");
  const std::string all = zoo().expected("data");
  const Shape& shape = a.meta().shape;
  for (int64_t t = 0; t < shape[0]; ++t) {
    const Shape start{t, 0, 0, 0}, count{1, shape[1], 1, shape[3]};
    EXPECT_EQ(read_box(a, start, count), slice(all, shape, start, count, 4)) << "date " << t;
    const auto chunk = a.chunk({t, 0, 0, 0});
    EXPECT_EQ(std::string(chunk->begin(), chunk->end()), slice(all, shape, start, count, 4));
  }
}

TEST_F(ZarrZoo, MissingChunksAreFill) {
  const Group g = group();
  const auto deleted = g.array("f8_deleted_chunk").chunk({1, 1});
  ASSERT_EQ(deleted->size(), 5u * 3 * 8);
  for (size_t i = 0; i < 15; ++i) {
    double v;
    std::memcpy(&v, deleted->data() + 8 * i, 8);
    EXPECT_EQ(v, 3.25);
  }
  const Array unwritten = g.array("f4_unwritten_chunk");
  const auto never = unwritten.chunk({1, 0});
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(std::memcmp(never->data() + 4 * i, unwritten.meta().fill.data(), 4), 0);
  EXPECT_EQ(g.array("f4_unwritten_chunk", 0).chunk({1, 0})->size(), 64u);  // uncached
}

TEST_F(ZarrZoo, ReadAllConvertsEveryDtype) {
  const Group g = group();
  auto expected_as = [](const std::string& name, auto zero) {
    const std::string b = zoo().expected(name);
    std::vector<decltype(zero)> v(b.size() / sizeof(zero));
    std::memcpy(v.data(), b.data(), b.size());
    return v;
  };
  const auto f8 = expected_as("f8_zstd_1d", 0.0);
  EXPECT_EQ(g.array("f8_zstd_1d").read_all_f64(), f8);
  const auto f4 = expected_as("f4_lz4_2d", 0.0f);
  const auto f4_read = g.array("f4_lz4_2d").read_all_f64();
  ASSERT_EQ(f4_read.size(), f4.size());
  for (size_t i = 0; i < f4.size(); ++i)
    EXPECT_TRUE(std::isnan(f4[i]) ? std::isnan(f4_read[i]) : f4_read[i] == static_cast<double>(f4[i])) << i;
  const auto dates = expected_as("m8s_dates", int64_t{0});
  EXPECT_EQ(g.array("m8s_dates").read_all_i64(), dates);
  EXPECT_EQ(dates[0], 283996800);  // 1979-01-01T00:00:00
  EXPECT_EQ(dates[1] - dates[0], 6 * 3600);
  EXPECT_EQ(g.array("m8s_dates").read_all_f64()[29], static_cast<double>(dates[29]));
  EXPECT_EQ(g.array("i8_bitshuffle_2d").read_all_i64(), expected_as("i8_bitshuffle_2d", int64_t{0}));
  const auto b1 = expected_as("b1_noshuffle_1d", uint8_t{0});
  EXPECT_EQ(g.array("b1_noshuffle_1d").read_all_i64(), std::vector<int64_t>(b1.begin(), b1.end()));
  EXPECT_EQ(g.array("f8_scalar").read_all_f64(), std::vector<double>{2.5});
  EXPECT_THAT(error_of([&] { g.array("f4_lz4_2d").read_all_i64(); }),
              HasSubstr("f4_lz4_2d: read_all_i64: dtype <f4 is floating point"));
}

TEST_F(ZarrZoo, ParallelReadsGiveIdenticalResults) {
  const Group g = group();
  for (const std::string name : {"data", "f4_big_chunks", "f4_lz4_2d"}) {
    SCOPED_TRACE(name);
    const Array shared = g.array(name, 1, 2);  // a tiny cache: evictions race with inserts
    const std::string want = zoo().expected(name);
    std::string got[2];
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([&, t] {
        for (int rep = 0; rep < 5; ++rep) got[t] = read_whole(shared);
      });
    for (auto& th : threads) th.join();
    EXPECT_TRUE(got[0] == want && got[1] == want);
  }
}

TEST_F(ZarrZoo, BoxOutsideTheArrayIsAnError) {
  const Array a = group().array("f4_lz4_2d");
  float out[4];
  EXPECT_THAT(error_of([&] { a.read({36, 0}, {2, 2}, out); }), HasSubstr("outside the array's shape [37, 23]"));
  EXPECT_THAT(error_of([&] { a.read({0}, {1}, out); }), HasSubstr("f4_lz4_2d: box start [0]"));
  EXPECT_THAT(error_of([&] { a.chunk({4, 0}); }), HasSubstr("chunk index [4, 0] outside the chunk grid [4, 4]"));
  a.read({3, 3}, {0, 5}, out);  // an empty box reads nothing
}

// ---- Bad stores -------------------------------------------------------------

TEST_F(ZarrBadInput, MissingStorePath) {
  EXPECT_THAT(error_of([] { Group::open("/nonexistent/era5.zarr"); }),
              HasSubstr("/nonexistent/era5.zarr: no such Zarr store (the path does not exist)"));
}

TEST_F(ZarrBadInput, StoreWithoutZgroup) {
  const fs::path s = scratch_store({});
  fs::remove(s / ".zgroup");
  EXPECT_THAT(error_of([&] { Group::open(s.string()); }), HasSubstr(s.string() + ": not a Zarr v2 group (no .zgroup)"));
  EXPECT_THAT(error_of([&] { Group::open((zoo().store() / "data").string()); }),
              HasSubstr("data: a Zarr array, not a group (no .zgroup)"));
}

// zarr-python writes attributes with json.dumps, which writes NaN and
// ±Infinity bare: the store opens, those values read as null, strings keep
// theirs.
TEST_F(ZarrBadInput, PythonsNonFiniteAttributesReadAsNull) {
  const fs::path s = scratch_store({});
  write_bytes(s / ".zattrs",
              R"({"a": NaN, "b": "NaN and \"Infinity\" in a string", "c": [1.5, -Infinity], "d": Infinity, "NaN": 2})");
  const Group g = Group::open(s.string());
  EXPECT_TRUE(g.attrs().at("a").is_null());
  EXPECT_EQ(g.attrs().at("b"), "NaN and \"Infinity\" in a string");
  EXPECT_EQ(g.attrs().at("c")[0], 1.5);
  EXPECT_TRUE(g.attrs().at("c")[1].is_null());
  EXPECT_TRUE(g.attrs().at("d").is_null());
  EXPECT_EQ(g.attrs().at("NaN"), 2);  // a key, inside a string
}

TEST_F(ZarrBadInput, ZarrV3Store) {
  const fs::path s = scratch_store({});
  write_bytes(s / "zarr.json", R"({"zarr_format": 3, "node_type": "group"})");
  EXPECT_THAT(error_of([&] { Group::open(s.string()); }),
              HasSubstr(s.string() + ": Zarr v3 store (zarr.json); only Zarr v2 (.zgroup/.zarray) is supported"));
}

TEST_F(ZarrBadInput, MissingArray) {
  EXPECT_THAT(error_of([&] { group().array("temperature"); }),
              HasSubstr(zoo().store().string() + ": no array 'temperature' (arrays here: b1_noshuffle_1d, data,"));
}

TEST_F(ZarrBadInput, UnsupportedDtypes) {
  const Group bad = Group::open(zoo().bad().string());
  for (const auto& [name, dtype] : std::vector<std::pair<std::string, std::string>>{
           {"big_endian", ">f4"}, {"complex", "<c8"}, {"datetime_ns", "<M8[ns]"}}) {
    EXPECT_THAT(error_of([&, n = name] { bad.array(n); }),
                HasSubstr(zoo().bad().string() + "/" + name + ": unsupported dtype '" + dtype + "'"));
  }
  const fs::path s = scratch_store({"f4_lz4_2d"});
  json meta = json::parse(read_bytes(s / "f4_lz4_2d" / ".zarray"));
  meta["dtype"] = "|O";
  write_bytes(s / "f4_lz4_2d" / ".zarray", meta.dump());
  EXPECT_THAT(error_of([&] { Group::open(s.string()).array("f4_lz4_2d"); }),
              HasSubstr("f4_lz4_2d: unsupported dtype '|O'"));
}

TEST_F(ZarrBadInput, UnsupportedCompressors) {
  const Group bad = Group::open(zoo().bad().string());
  for (const std::string id : {"zlib", "zstd", "gzip"})
    EXPECT_THAT(error_of([&] { bad.array(id); }),
                HasSubstr("bad.zarr/" + id + ": unsupported compressor '" + id + "' (supported: blosc, or null)"));
}

TEST_F(ZarrBadInput, FiltersAndOrderF) {
  const Group bad = Group::open(zoo().bad().string());
  EXPECT_THAT(error_of([&] { bad.array("delta_filter"); }),
              HasSubstr("bad.zarr/delta_filter: filters are not supported (found: \"delta\")"));
  EXPECT_THAT(error_of([&] { bad.array("order_f"); }),
              HasSubstr("bad.zarr/order_f: order \"F\" is not supported (only \"C\")"));
}

TEST_F(ZarrBadInput, BadMetadataFields) {
  const fs::path s = scratch_store({"f4_lz4_2d"});
  const fs::path zarray = s / "f4_lz4_2d" / ".zarray";
  const json good = json::parse(read_bytes(zarray));
  auto error_with = [&](const char* key, const json& value) {
    json meta = good;
    meta[key] = value;
    write_bytes(zarray, meta.dump());
    return error_of([&] { Group::open(s.string()).array("f4_lz4_2d"); });
  };
  EXPECT_THAT(error_with("fill_value", "banana"), HasSubstr("bad fill_value for a float array: \"banana\""));
  EXPECT_THAT(error_with("dimension_separator", "-"), HasSubstr("unsupported dimension_separator \"-\""));
  EXPECT_THAT(error_with("zarr_format", 3), HasSubstr("zarr_format 3 in .zarray"));
  EXPECT_THAT(error_with("chunks", json::array({10})), HasSubstr("differ in rank"));
  EXPECT_THAT(error_with("chunks", json::array({0, 7})), HasSubstr("'chunks' must hold integers >= 1"));
  write_bytes(zarray, "{\"shape\": [");
  EXPECT_THAT(error_of([&] { Group::open(s.string()).array("f4_lz4_2d"); }), HasSubstr(".zarray is not valid JSON"));
}

// ---- Corrupt chunks ---------------------------------------------------------

TEST_F(ZarrCorrupt, TruncatedChunk) {
  const fs::path s = scratch_store({"f4_lz4_2d"});
  const fs::path c = s / "f4_lz4_2d" / "1.1";
  const std::string good = read_bytes(c);
  write_bytes(c, good.substr(0, good.size() / 2));
  const Array a = Group::open(s.string()).array("f4_lz4_2d");
  EXPECT_THAT(error_of([&] { read_whole(a); }),
              HasSubstr(s.string() + "/f4_lz4_2d: chunk 1.1 is corrupt: blosc header says " +
                        std::to_string(good.size()) + " bytes compressed but the file has " +
                        std::to_string(good.size() / 2)));
}

TEST_F(ZarrCorrupt, HeaderOnlyShortAndEmptyChunks) {
  const fs::path s = scratch_store({"f4_lz4_2d"});
  const fs::path c = s / "f4_lz4_2d" / "0.0";
  const std::string good = read_bytes(c);
  const Array a = Group::open(s.string()).array("f4_lz4_2d", 0);
  write_bytes(c, good.substr(0, 16));
  EXPECT_THAT(error_of([&] { a.chunk({0, 0}); }), HasSubstr("chunk 0.0 is corrupt: blosc header says " +
                                                            std::to_string(good.size()) +
                                                            " bytes compressed but the file has 16"));
  write_bytes(c, good.substr(0, 5));
  EXPECT_THAT(error_of([&] { a.chunk({0, 0}); }),
              HasSubstr("chunk 0.0 is corrupt: the file has 5 bytes, less than the 16-byte blosc header"));
  write_bytes(c, "");
  EXPECT_THAT(error_of([&] { a.chunk({0, 0}); }), HasSubstr("the file has 0 bytes"));
  write_bytes(c, std::string(300, 'x'));  // the chunk holds 280 bytes
  EXPECT_THAT(error_of([&] { a.chunk({0, 0}); }),
              HasSubstr("chunk 0.0 is corrupt: not a blosc buffer (header format version 120;"));
  std::string oversized = good.substr(0, 16) + std::string(284, 'x');  // a header that agrees with 300 bytes
  const uint32_t cbytes = 300;
  std::memcpy(&oversized[12], &cbytes, 4);
  write_bytes(c, oversized);
  EXPECT_THAT(error_of([&] { a.chunk({0, 0}); }),
              HasSubstr("chunk 0.0 is corrupt: the file has 300 bytes, more than a blosc chunk of 280 bytes can take"));
}

TEST_F(ZarrCorrupt, RandomBytesChunk) {
  const fs::path s = scratch_store({"data"});
  const fs::path c = s / "data" / "2.0.0.0";
  const Array a = Group::open(s.string()).array("data", 0);
  std::mt19937 rng(11);
  for (int k = 0; k < 50; ++k) {
    std::string junk(std::uniform_int_distribution<size_t>(0, 2000)(rng), '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    write_bytes(c, junk);
    EXPECT_THAT(error_of([&] { a.chunk({2, 0, 0, 0}); }), HasSubstr("/data: chunk 2.0.0.0 is corrupt: ")) << k;
  }
}

TEST_F(ZarrCorrupt, GarbledPayloadNeverCrashes) {
  // The header stays valid, so libblosc decodes garbage: it must fail or
  // return some bytes, but stay inside its buffers.
  const fs::path s = scratch_store({"data", "f4_big_chunks"});
  std::mt19937 rng(5);
  for (const auto& [name, key, idx] : std::vector<std::tuple<std::string, std::string, Shape>>{
           {"data", "1.0.0.0", {1, 0, 0, 0}}, {"f4_big_chunks", "1.0", {1, 0}}}) {
    const fs::path c = s / name / key;
    const std::string good = read_bytes(c);
    const Array a = Group::open(s.string()).array(name, 0, 2);
    int errors = 0;
    for (int k = 0; k < 100; ++k) {
      std::string bad = good;
      for (int flips = 0; flips < 1 + k % 20; ++flips)
        bad[std::uniform_int_distribution<size_t>(16, bad.size() - 1)(rng)] = static_cast<char>(rng());
      write_bytes(c, bad);
      try {
        a.chunk(idx);
      } catch (const ZarrError& e) {
        EXPECT_THAT(e.what(), HasSubstr(name + ": chunk " + key + " is corrupt: "));
        ++errors;
      }
    }
    RecordProperty(name + "_garbled_errors", errors);
  }
}

TEST_F(ZarrCorrupt, ChunkFromAnotherArrayHasWrongSize) {
  const fs::path s = scratch_store({"f4_lz4_2d", "f4_zstd_bitshuffle_4d"});
  fs::copy_file(s / "f4_lz4_2d" / "0.0", s / "f4_zstd_bitshuffle_4d" / "0.0.0.0", fs::copy_options::overwrite_existing);
  const Array a = Group::open(s.string()).array("f4_zstd_bitshuffle_4d");
  EXPECT_THAT(error_of([&] { read_whole(a); }),
              HasSubstr("f4_zstd_bitshuffle_4d: chunk 0.0.0.0 is corrupt: blosc header says 280 bytes decompressed "
                        "but the chunk has 192 bytes"));
}

TEST_F(ZarrCorrupt, UncompressedChunkWrongSize) {
  const fs::path s = scratch_store({"f4_raw_4d"});
  const fs::path c = s / "f4_raw_4d" / "0.1.1.0";
  write_bytes(c, read_bytes(c) + "x");
  const Array a = Group::open(s.string()).array("f4_raw_4d");
  EXPECT_THAT(error_of([&] { read_whole(a); }),
              HasSubstr("f4_raw_4d: chunk 0.1.1.0 is corrupt: the file has 65 bytes but an uncompressed chunk has 64"));
}

TEST_F(ZarrCorrupt, ChunkThatIsADirectory) {
  const fs::path s = scratch_store({"f4_lz4_2d"});
  fs::remove(s / "f4_lz4_2d" / "2.3");
  fs::create_directory(s / "f4_lz4_2d" / "2.3");
  const Array a = Group::open(s.string()).array("f4_lz4_2d");
  EXPECT_THAT(error_of([&] { a.chunk({2, 3}); }),
              HasSubstr("f4_lz4_2d: chunk 2.3: " + (s / "f4_lz4_2d" / "2.3").string() + " is not a regular file"));
}

TEST_F(ZarrCorrupt, DeletedChunkWithNullFillReadsZeros) {
  const fs::path s = scratch_store({"f4_fill_null"});
  fs::remove(s / "f4_fill_null" / "1.1");
  const Array a = Group::open(s.string()).array("f4_fill_null");
  const std::string all = zoo().expected("f4_fill_null");
  const std::string got = read_box(a, {4, 4}, {4, 4});
  EXPECT_EQ(got, std::string(64, '\0'));
  EXPECT_EQ(read_box(a, {0, 0}, {4, 4}), slice(all, {10, 10}, {0, 0}, {4, 4}, 4));
}

}  // namespace
}  // namespace wg::zarr
