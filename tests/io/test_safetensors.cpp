// The safetensors codec: round trip, and every kind of broken file gives
// its own clear error with nothing returned.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "wg/io/safetensors.h"

namespace wg {
namespace {

TensorRecord rec(const std::string& name, DType d, std::vector<int64_t> shape, uint8_t fill = 1) {
  TensorRecord r;
  r.name = name;
  r.dtype = d;
  r.shape = std::move(shape);
  r.data.assign(size_t(r.numel()) * dtype_size(d), fill);
  return r;
}

// A file from a hand-written header and a data buffer of `data_bytes` bytes.
std::string raw(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x01');
}

std::string error_of(const std::string& bytes) {
  try {
    parse_safetensors(bytes, "f.safetensors");
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Safetensors, RoundTripKeepsNamesDtypesShapesBytesAndMetadata) {
  SafetensorsFile f;
  f.metadata["format"] = "pt";
  f.tensors = {rec("a.weight", DType::F32, {2, 3}, 7), rec("b", DType::BF16, {5}, 9), rec("c", DType::F16, {}, 3),
               rec("d", DType::I64, {0}), rec("e", DType::F64, {1, 1, 2}, 4), rec("f", DType::U8, {3}, 5)};
  f.tensors[0].data[5] = 42;
  const std::string bytes = serialize_safetensors(f);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // header padded to 8 bytes
  const SafetensorsFile g = parse_safetensors(bytes, "mem");
  ASSERT_EQ(g.tensors.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(g.tensors[i].name, f.tensors[i].name);
    EXPECT_EQ(g.tensors[i].dtype, f.tensors[i].dtype);
    EXPECT_EQ(g.tensors[i].shape, f.tensors[i].shape);
    EXPECT_EQ(g.tensors[i].data, f.tensors[i].data);
  }
  EXPECT_EQ(g.metadata.at("format"), "pt");
  EXPECT_EQ(serialize_safetensors(g), bytes);
}

TEST(Safetensors, WriteIsAtomicAndReadsBack) {
  const auto path = std::filesystem::temp_directory_path() / "wg_st_roundtrip.safetensors";
  SafetensorsFile f;
  f.tensors = {rec("x", DType::F32, {4})};
  write_safetensors(path.string(), f);
  EXPECT_EQ(read_safetensors(path.string()).tensors[0].data, f.tensors[0].data);
  for (const auto& e : std::filesystem::directory_iterator(path.parent_path()))
    EXPECT_EQ(e.path().string().find("wg_st_roundtrip.safetensors.tmp"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(Safetensors, MissingFile) {
  try {
    read_safetensors("/nonexistent/w.safetensors");
    FAIL();
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/w.safetensors: cannot open"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, TruncatedFiles) {
  SafetensorsFile f;
  f.tensors = {rec("x", DType::F32, {4})};
  const std::string good = serialize_safetensors(f);
  EXPECT_NE(error_of(good.substr(0, 5)).find("truncated: 5 bytes"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, 20)).find("truncated: header length"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() - 3)).find("lies beyond the data buffer"), std::string::npos)
      << error_of(good.substr(0, good.size() - 3));
}

TEST(Safetensors, CorruptHeaders) {
  EXPECT_NE(error_of(raw("{\"x\": {\"dtype\": \"F32\", ", 0)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(raw("[1, 2]", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(raw("{\"x\": {\"dtype\": \"F32\"}}", 0)).find("tensor 'x': needs dtype, shape and data_offsets"),
            std::string::npos);
  std::string huge(8, '\xff');
  EXPECT_NE(error_of(huge + "{}").find("implausible"), std::string::npos);
  EXPECT_NE(error_of(raw("{\"__metadata__\": {\"a\": 1}}", 0)).find("__metadata__ value of 'a'"), std::string::npos);
}

TEST(Safetensors, HeaderThatLiesAboutOffsets) {
  // 2x2 F32 needs 16 bytes, the offsets claim 12
  EXPECT_NE(error_of(raw(R"({"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 12))
                .find("tensor 'x': data_offsets hold 12 bytes but shape [2, 2] of F32 needs 16"),
            std::string::npos);
  EXPECT_NE(error_of(raw(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8)).find("run backwards"),
            std::string::npos);
  // overlapping tensors
  EXPECT_NE(error_of(raw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                             "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                         12))
                .find("overlaps"),
            std::string::npos);
  // a hole
  EXPECT_NE(error_of(raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8)).find("hole of 4 bytes"),
            std::string::npos);
  // bytes nobody owns
  EXPECT_NE(error_of(raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 10))
                .find("6 bytes after the last tensor"),
            std::string::npos);
  EXPECT_NE(error_of(raw(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4))
                .find("non-negative"),
            std::string::npos);
}

// An empty tensor starts where the next one does ([x, x] then [x, y]); with
// many of them an unstable sort by start alone put the non-empty one first
// and called the pair an overlap.
TEST(Safetensors, ManyEmptyTensorsBesideFullOnesRead) {
  std::string header = "{";
  uint64_t pos = 0;
  for (int i = 0; i < 40; ++i) {
    char name[8];
    std::snprintf(name, sizeof name, "t%03d", i);
    const bool empty = i % 2 == 0;
    header += std::string(i ? "," : "") + "\"" + name +
              "\": {\"dtype\": \"F32\", \"shape\": " + (empty ? "[0, 4]" : "[1]") + ", \"data_offsets\": [" +
              std::to_string(pos) + ", " + std::to_string(pos + (empty ? 0 : 4)) + "]}";
    if (!empty) pos += 4;
  }
  header += "}";
  const SafetensorsFile f = parse_safetensors(raw(header, pos), "f.safetensors");
  ASSERT_EQ(f.tensors.size(), 40u);
  for (const TensorRecord& r : f.tensors) EXPECT_EQ(r.data.size(), size_t(r.numel()) * 4) << r.name;
}

TEST(Safetensors, UnsupportedDtype) {
  EXPECT_NE(error_of(raw(R"({"m": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]}})", 4))
                .find("tensor 'm': unsupported dtype 'I16' (supported: F32, F16, BF16, F64, I64, U8)"),
            std::string::npos);
}

TEST(Safetensors, DuplicateNames) {
  EXPECT_NE(error_of(raw(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                             "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                         8))
                .find("tensor name 'w' appears twice"),
            std::string::npos);
  SafetensorsFile f;
  f.tensors = {rec("w", DType::F32, {1}), rec("w", DType::F32, {1})};
  EXPECT_THROW(serialize_safetensors(f), SafetensorsError);
}

}  // namespace
}  // namespace wg
