// torch.save checkpoints (.chkpt): files PyTorch wrote read here exactly,
// files written here load in PyTorch (torch.load(weights_only=True) +
// load_state_dict(strict=True)), both through tests/io/chkpt_fixtures.py and
// Debian's python3-torch; and, without Python, bit-exact round trips, clear
// errors naming the file, all-at-once mismatches and "module." stripping.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/tiny_config.h"
#include "wg/io/chkpt.h"
#include "wg/io/weights.h"
#include "wg/model/model_options.h"
#include "wg/train/trainer.h"
#include "file_bytes.h"

namespace wg {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// tests/io/chkpt_fixtures.py's TinyNet, in the same order.
struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() {
    register_module("linear", torch::nn::Linear(4, 3));
    register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({3})));
    register_module("embed", torch::nn::Embedding(5, 2));
  }
};
TORCH_MODULE(TinyNet);

TinyNet tiny_net(uint64_t seed) {
  torch::manual_seed(seed);
  TinyNet net;
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.copy_(torch::randn_like(p));
  return net;
}

using wg::io_testing::read_bytes;
using wg::io_testing::write_bytes;

std::string bytes_of(const TensorRecord& r) { return std::string(r.data.begin(), r.data.end()); }

// A fresh directory per test program.
struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("wg_chkpt_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() { fs::remove_all(dir); }
};
const fs::path& tmp_dir() {
  static const TempDir d;
  return d.dir;
}
std::string tmp(const std::string& name) { return (tmp_dir() / name).string(); }

// The expectation format of chkpt_fixtures.py: index.json + <n>.bin.
void write_expected(const fs::path& dir, const SafetensorsFile& f) {
  fs::create_directories(dir);
  json index = json::array();
  for (size_t n = 0; n < f.tensors.size(); ++n) {
    const TensorRecord& r = f.tensors[n];
    write_bytes(dir / (std::to_string(n) + ".bin"), bytes_of(r));
    index.push_back({{"name", r.name}, {"dtype", dtype_name(r.dtype)}, {"shape", r.shape},
                     {"bin", std::to_string(n) + ".bin"}});
  }
  write_bytes(dir / "index.json", index.dump(1));
}

void expect_matches(const SafetensorsFile& got, const fs::path& expected_dir) {
  const json index = json::parse(read_bytes(expected_dir / "index.json"));
  ASSERT_EQ(got.tensors.size(), index.size());
  for (size_t n = 0; n < index.size(); ++n) {
    const TensorRecord& r = got.tensors[n];
    const std::string name = index[n]["name"];
    EXPECT_EQ(r.name, name);
    EXPECT_STREQ(dtype_name(r.dtype), index[n]["dtype"].get<std::string>().c_str()) << name;
    EXPECT_EQ(r.shape, index[n]["shape"].get<std::vector<int64_t>>()) << name;
    EXPECT_TRUE(bytes_of(r) == read_bytes(expected_dir / index[n]["bin"].get<std::string>())) << name << ": values";
  }
  EXPECT_TRUE(got.metadata.empty());
}

// ---- with PyTorch: chkpt_fixtures.py, once per program
struct Fixtures {
  fs::path dir = tmp_dir() / "torch";
  std::string skip, error;
  Fixtures() {
    fs::create_directories(dir);
    if (std::system(WG_PYTHON3 " -c 'import torch' > /dev/null 2>&1") != 0) {
      skip = WG_PYTHON3 " cannot import torch: install Debian's python3-torch (scripts/setup.sh does)";
      return;
    }
    const std::string log = (dir / "write.log").string();
    const std::string cmd = "OMP_NUM_THREADS=1 " WG_PYTHON3 " '" WG_CHKPT_SCRIPT "' write '" + dir.string() +
                            "' > '" + log + "' 2>&1";
    if (std::system(cmd.c_str()) != 0) error = "the fixtures failed: " + cmd + "\n" + read_bytes(log);
  }
  std::string file(const std::string& name) const { return (dir / (name + ".chkpt")).string(); }
  fs::path expected(const std::string& name) const { return dir / "expected" / name; }
};

const Fixtures& fixtures() {
  static const Fixtures f;
  return f;
}

// chkpt_fixtures.py check: its exit status, its complaints in *output.
int torch_check(const std::string& file, const fs::path& expected, bool module, std::string* output) {
  const std::string log = tmp("check.log");
  const std::string cmd = "OMP_NUM_THREADS=1 " WG_PYTHON3 " '" WG_CHKPT_SCRIPT "' check '" + file + "' '" +
                          expected.string() + "'" + (module ? " --module" : "") + " > '" + log + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  *output = cmd + "\n" + read_bytes(log);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

class ChkptTorch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fixtures().skip.empty()) GTEST_SKIP() << fixtures().skip;
    ASSERT_TRUE(fixtures().error.empty()) << fixtures().error;
  }
  const Fixtures& fx() const { return fixtures(); }
};

TEST_F(ChkptTorch, StateDictOfAModuleReadsExactly) {
  for (const char* name : {"module", "module_p4", "ddp"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(is_chkpt_file(fx().file(name)));
    expect_matches(read_chkpt(fx().file(name)), fx().expected(name));
  }
}

TEST_F(ChkptTorch, EveryDtypeViewsSharedStoragesScalarsAndEmptyTensors) {
  const SafetensorsFile f = read_chkpt(fx().file("zoo"));
  expect_matches(f, fx().expected("zoo"));
  // a few values spelled out, independent of the expectation files
  const torch::Tensor stepped = to_tensor(*f.find("stepped"));
  EXPECT_TRUE(torch::equal(stepped, torch::tensor({1.f, 3.f, 5.f, 13.f, 15.f, 17.f, 25.f, 27.f, 29.f}).view({3, 3})));
  EXPECT_TRUE(torch::equal(to_tensor(*f.find("shared.a")), torch::arange(2, 8, torch::kFloat32)));
  EXPECT_TRUE(torch::equal(to_tensor(*f.find("shared.b")), torch::arange(10, 20, torch::kFloat32).view({2, 5})));
  EXPECT_TRUE(f.find("scalar")->shape.empty());
  EXPECT_EQ(to_tensor(*f.find("scalar")).item<float>(), 3.5f);
  EXPECT_EQ(f.find("empty")->shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(to_tensor(*f.find("i64"))[4].item<int64_t>(), -(int64_t(1) << 62));
}

TEST_F(ChkptTorch, LoadsIntoAModuleAlsoFromADistributedDataParallelSave) {
  const SafetensorsFile expected = read_chkpt(fx().file("module"));
  for (const char* name : {"module", "ddp"}) {
    TinyNet net = tiny_net(7);
    EXPECT_EQ(load_weights(*net, fx().file(name)), 5) << name;
    for (const auto& r : expected.tensors)
      EXPECT_TRUE(torch::equal(net->named_parameters()[r.name], to_tensor(r))) << name << " " << r.name;
  }
}

TEST_F(ChkptTorch, UnsupportedContentsAreClearErrorsNamingTheFile) {
  const std::pair<const char*, const char*> cases[] = {
      {"complex", "tensor 'a.b' has dtype torch.complex64, which is not supported"},
      {"int32", "tensor 'idx' has dtype torch.int32, which is not supported"},
      {"nested", "entry 'model' is a dict, not a tensor"},
      {"legacy", "not a torch.save zip archive"},
  };
  for (const auto& [name, message] : cases) {
    try {
      read_chkpt(fx().file(name));
      ADD_FAILURE() << name << ": no error";
    } catch (const ChkptError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind(fx().file(name) + ": ", 0), 0u) << m;
      EXPECT_NE(m.find(message), std::string::npos) << m;
    }
  }
}

TEST_F(ChkptTorch, OurModuleWeightsLoadInPyTorchWithStrictLoadStateDict) {
  TinyNet net = tiny_net(3);
  save_weights_chkpt(*net, tmp("ours.chkpt"));
  write_expected(tmp_dir() / "ours_expected", weights_file(*net));
  std::string out;
  EXPECT_EQ(torch_check(tmp("ours.chkpt"), tmp_dir() / "ours_expected", true, &out), 0) << out;
}

TEST_F(ChkptTorch, OurTensorsOfEveryDtypeLoadInPyTorch) {
  SafetensorsFile f;
  f.tensors.push_back(to_record("f32", torch::randn({3, 4}), DType::F32));
  f.tensors.push_back(to_record("f64", torch::randn({2, 3}), DType::F64));
  f.tensors.push_back(to_record("bf16", torch::randn({5}), DType::BF16));
  f.tensors.push_back(to_record("f16", torch::randn({2, 2}), DType::F16));
  const torch::Tensor i64 = torch::tensor({int64_t(-3), int64_t(1) << 40, -(int64_t(1) << 62)});
  f.tensors.push_back(to_record("i64", i64, DType::I64));
  f.tensors.push_back(to_record("u8", torch::arange(256).view({16, 16}), DType::U8));
  f.tensors.push_back(to_record("scalar", torch::tensor(2.5), DType::F32));
  f.tensors.push_back(to_record("empty", torch::zeros({0, 3}), DType::F32));
  f.tensors.push_back(to_record("long.name.with.dots.0", torch::randn({70000}), DType::F32));
  write_chkpt(tmp("zoo_ours.chkpt"), f);
  write_expected(tmp_dir() / "zoo_ours_expected", f);
  std::string out;
  EXPECT_EQ(torch_check(tmp("zoo_ours.chkpt"), tmp_dir() / "zoo_ours_expected", false, &out), 0) << out;
}

TEST_F(ChkptTorch, TheCheckFailsOnAWrongValueAndAWrongModule) {
  TinyNet net = tiny_net(3);
  save_weights_chkpt(*net, tmp("ours2.chkpt"));
  SafetensorsFile f = weights_file(*net);
  f.tensors[1].data[0] ^= 1;  // one bit of linear.bias
  write_expected(tmp_dir() / "wrong_expected", f);
  std::string out;
  EXPECT_EQ(torch_check(tmp("ours2.chkpt"), tmp_dir() / "wrong_expected", true, &out), 1) << out;
  EXPECT_NE(out.find("linear.bias: values differ"), std::string::npos) << out;
  // a state_dict that is not TinyNet's: load_state_dict(strict=True) refuses it
  SafetensorsFile g = weights_file(*net);
  g.tensors.pop_back();
  write_chkpt(tmp("short.chkpt"), g);
  write_expected(tmp_dir() / "short_expected", g);
  EXPECT_EQ(torch_check(tmp("short.chkpt"), tmp_dir() / "short_expected", true, &out), 1) << out;
  EXPECT_NE(out.find("Missing key(s) in state_dict: \"embed.weight\""), std::string::npos) << out;
}

// ---- without Python
SafetensorsFile every_kind() {
  torch::manual_seed(5);
  SafetensorsFile f;
  f.tensors.push_back(to_record("b.f32", torch::randn({3, 4}), DType::F32));
  f.tensors.push_back(to_record("a.f64", torch::randn({2, 3}), DType::F64));
  f.tensors.push_back(to_record("bf16", torch::randn({5}), DType::BF16));
  f.tensors.push_back(to_record("f16", torch::randn({2, 1, 2}), DType::F16));
  f.tensors.push_back(to_record("i64", torch::tensor({int64_t(-3), int64_t(1) << 40}), DType::I64));
  f.tensors.push_back(to_record("u8", torch::arange(256), DType::U8));
  f.tensors.push_back(to_record("scalar", torch::tensor(2.5), DType::F32));
  f.tensors.push_back(to_record("empty", torch::zeros({0, 3}), DType::F32));
  return f;
}

void expect_same(const SafetensorsFile& a, const SafetensorsFile& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t k = 0; k < a.tensors.size(); ++k) {
    EXPECT_EQ(a.tensors[k].name, b.tensors[k].name);
    EXPECT_EQ(a.tensors[k].dtype, b.tensors[k].dtype) << a.tensors[k].name;
    EXPECT_EQ(a.tensors[k].shape, b.tensors[k].shape) << a.tensors[k].name;
    EXPECT_TRUE(a.tensors[k].data == b.tensors[k].data) << a.tensors[k].name;
  }
}

template <typename F>
std::string chkpt_error(F&& f) {
  try {
    f();
  } catch (const ChkptError& e) {
    return e.what();
  }
  return "(no ChkptError)";
}

TEST(Chkpt, RoundTripIsBitExactInOrder) {
  const SafetensorsFile f = every_kind();
  write_chkpt(tmp("rt.chkpt"), f);
  EXPECT_TRUE(is_chkpt_file(tmp("rt.chkpt")));
  EXPECT_FALSE(fs::exists(tmp("rt.chkpt") + ".tmp." + std::to_string(::getpid())));
  expect_same(read_chkpt(tmp("rt.chkpt")), f);
  // more than one SETITEMS batch (1000), and no tensors at all
  SafetensorsFile many;
  for (int k = 0; k < 1234; ++k)
    many.tensors.push_back(to_record("t" + std::to_string(k), torch::full({2}, k), DType::F32));
  write_chkpt(tmp("many.chkpt"), many);
  expect_same(read_chkpt(tmp("many.chkpt")), many);
  write_chkpt(tmp("none.chkpt"), SafetensorsFile{});
  EXPECT_TRUE(read_chkpt(tmp("none.chkpt")).tensors.empty());
}

TEST(Chkpt, SafetensorsIsNotAChkpt) {
  TinyNet net = tiny_net(1);
  save_weights(*net, tmp("w.safetensors"));
  EXPECT_FALSE(is_chkpt_file(tmp("w.safetensors")));
  EXPECT_FALSE(is_chkpt_file(tmp("does_not_exist")));
  TinyNet other = tiny_net(2);
  EXPECT_EQ(load_weights(*other, tmp("w.safetensors")), 5);  // still safetensors
}

TEST(Chkpt, BrokenFilesAreOneErrorNamingTheFile) {
  write_chkpt(tmp("good.chkpt"), every_kind());
  const std::string good = read_bytes(tmp("good.chkpt"));

  write_bytes(tmp("text.chkpt"), "not a zip at all");
  std::string m = chkpt_error([] { read_chkpt(tmp("text.chkpt")); });
  EXPECT_EQ(m.rfind(tmp("text.chkpt") + ": not a torch.save zip archive", 0), 0u) << m;

  write_bytes(tmp("truncated.chkpt"), good.substr(0, good.size() / 2));
  m = chkpt_error([] { read_chkpt(tmp("truncated.chkpt")); });
  EXPECT_EQ(m.rfind(tmp("truncated.chkpt") + ": not a readable torch.save zip archive", 0), 0u) << m;

  m = chkpt_error([] { read_chkpt(tmp("missing.chkpt")); });
  EXPECT_EQ(m.rfind(tmp("missing.chkpt") + ": cannot open", 0), 0u) << m;

  // archives with a data.pkl of our choosing
  auto archive = [](const std::string& name, const std::string& pkl, bool with_storage) {
    caffe2::serialize::PyTorchStreamWriter zip(tmp(name));
    if (!pkl.empty()) zip.writeRecord("data.pkl", pkl.data(), pkl.size());
    if (with_storage) zip.writeRecord("data/0", "\0\0\0\0", 4);
    zip.writeEndOfFile();
    return tmp(name);
  };
  const std::string opcode = archive("opcode.chkpt", std::string("\x80\x02}\x8f.", 5), false);
  m = chkpt_error([&] { read_chkpt(opcode); });
  EXPECT_EQ(m, opcode + ": data.pkl: unsupported pickle opcode 0x8f at byte 3");

  const std::string no_stop = archive("nostop.chkpt", std::string("\x80\x02}", 3), false);
  m = chkpt_error([&] { read_chkpt(no_stop); });
  EXPECT_EQ(m, no_stop + ": data.pkl: truncated pickle: no STOP before its end at byte 3");

  const std::string cut = archive("cut.chkpt", std::string("\x80\x02X\x10\0\0\0abc", 10), false);
  m = chkpt_error([&] { read_chkpt(cut); });
  EXPECT_NE(m.find(cut + ": data.pkl: truncated pickle: opcode 0x58 needs 16 more bytes, 3 left at byte 2"),
            std::string::npos) << m;

  const std::string global = archive("global.chkpt", std::string("\x80\x02" "c\x01\n\x01\n.", 8), false);
  m = chkpt_error([&] { read_chkpt(global); });
  EXPECT_EQ(m, global + ": data.pkl: GLOBAL with a non-printable byte in its name at byte 2");

  const std::string list = archive("list.chkpt", std::string("\x80\x02].", 4), false);
  m = chkpt_error([&] { read_chkpt(list); });
  EXPECT_EQ(m, list + ": data.pkl holds a list, not a state_dict (a dict of tensors)");

  const std::string none = archive("nopkl.chkpt", "", true);
  m = chkpt_error([&] { read_chkpt(none); });
  EXPECT_NE(m.find(none + ": no data.pkl in the archive"), std::string::npos) << m;

  // a tensor reaching beyond its storage (4 bytes = 1 float, the tensor wants 2)
  using namespace std::string_literals;
  const std::string pkl = "\x80\x02}(X\x01\0\0\0a"s + "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\0\0\0storage"s +
                          "ctorch\nFloatStorage\nX\x01\0\0\0"s + "0X\x03\0\0\0cpuK\x01tQK\0K\x02\x85K\x01\x85\x89tRu."s;
  const std::string beyond = archive("beyond.chkpt", pkl, true);
  m = chkpt_error([&] { read_chkpt(beyond); });
  EXPECT_EQ(m, beyond + ": tensor 'a' reaches element 1 of storage '0', which has 1") << m;
}

TEST(Chkpt, WritingRefusesInconsistentRecords) {
  SafetensorsFile f = every_kind();
  f.tensors.push_back(f.tensors[0]);
  std::string m = chkpt_error([&] { write_chkpt(tmp("dup.chkpt"), f); });
  EXPECT_NE(m.find(tmp("dup.chkpt") + ": cannot write: tensor name 'b.f32' twice"), std::string::npos) << m;
  f = every_kind();
  f.tensors[0].data.pop_back();
  m = chkpt_error([&] { write_chkpt(tmp("short.chkpt"), f); });
  EXPECT_NE(m.find("cannot write tensor 'b.f32': data size does not match its shape"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(tmp("dup.chkpt")));
}

TEST(Chkpt, ModuleWeightsRoundTripAndStripADistributedDataParallelPrefix) {
  TinyNet a = tiny_net(1), b = tiny_net(2);
  save_weights_chkpt(*a, tmp("tiny.chkpt"));
  const SafetensorsFile f = read_chkpt(tmp("tiny.chkpt"));
  ASSERT_EQ(f.tensors.size(), 5u);
  EXPECT_EQ(f.tensors[0].name, "linear.weight");
  EXPECT_EQ(f.tensors[4].name, "embed.weight");
  EXPECT_EQ(load_weights(*b, tmp("tiny.chkpt")), 5);
  for (const auto& p : a->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), b->named_parameters()[p.key()]));

  TinyNet c = tiny_net(3);
  write_chkpt(tmp("ddp.chkpt"), weights_file(*a, DType::F32, "module."));
  EXPECT_EQ(load_weights(*c, tmp("ddp.chkpt")), 5);
  for (const auto& p : a->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), c->named_parameters()[p.key()]));

  // only when every name has the prefix
  SafetensorsFile mixed = weights_file(*a, DType::F32, "module.");
  mixed.tensors[0].name = "linear.weight";
  write_chkpt(tmp("mixed.chkpt"), mixed);
  EXPECT_THROW(load_weights(*c, tmp("mixed.chkpt")), WeightsMismatchError);
}

TEST(Chkpt, MismatchesFromAChkptAreAllListedAndNothingLoaded) {
  TinyNet a = tiny_net(1), b = tiny_net(2), before = tiny_net(2);
  SafetensorsFile f = weights_file(*a);
  f.tensors.erase(f.tensors.begin() + 1);  // missing: linear.bias
  // now linear.weight, norm.weight, norm.bias, embed.weight
  f.tensors[2] = to_record("norm.bias", torch::zeros({4}), DType::F32);         // wrong shape
  f.tensors[3] = to_record("embed.weight", torch::zeros({5, 2}), DType::I64);   // wrong dtype
  f.tensors.push_back(to_record("extra.bias", torch::zeros({3}), DType::F32));  // unexpected
  write_chkpt(tmp("bad.chkpt"), f);
  try {
    load_weights(*b, tmp("bad.chkpt"));
    FAIL() << "no error";
  } catch (const WeightsMismatchError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.problems().size(), 4u) << m;
    EXPECT_EQ(m.rfind(tmp("bad.chkpt") + ": 4 problem(s), nothing loaded", 0), 0u) << m;
    EXPECT_NE(m.find("missing: linear.bias [3]"), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected: extra.bias [3]"), std::string::npos) << m;
    EXPECT_NE(m.find("wrong shape: norm.bias is [4], the model's norm.bias is [3]"), std::string::npos) << m;
    EXPECT_NE(m.find("wrong dtype: embed.weight is I64"), std::string::npos) << m;
  }
  for (const auto& p : before->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), b->named_parameters()[p.key()]));
}

TEST(Chkpt, WeatherModelRoundTrip) {
  const Config c = wg::testing::tiny_config();
  const auto shapes = Dataset(c, 0, 1).stream_shapes();
  torch::manual_seed(1);
  WeatherModel a(model_options(c, shapes));
  torch::manual_seed(2);
  WeatherModel b(model_options(c, shapes));
  save_weights_chkpt(*a, tmp("model.chkpt"));
  EXPECT_EQ(load_weights(*b, tmp("model.chkpt")), int(a->named_parameters().size()));
  for (const auto& p : a->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), b->named_parameters()[p.key()])) << p.key();
}

}  // namespace
}  // namespace wg
