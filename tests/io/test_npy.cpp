// The .npy helpers (wg/io/npy.h) against numpy itself: numpy reads what
// they write (dtype, shape, values), they read what numpy writes, and bad
// files and shapes are errors naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "wg/io/npy.h"

namespace wg {
namespace {

namespace fs = std::filesystem;

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("wg_npy_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Runs a Python snippet with numpy (np) and the directory (d); true on exit 0.
  bool python(const std::string& code) const {
    const fs::path script = dir_ / "check.py";
    std::ofstream(script) << "import sys, numpy as np\nd = sys.argv[1]\n" << code << "\n";
    const std::string cmd = std::string(WG_PYTHON3) + " " + script.string() + " " + dir_.string();
    return std::system(cmd.c_str()) == 0;
  }
  std::string error_of_reading(const std::string& file) const {
    try {
      npy::read<float>(dir_ / file);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "no error";
  }
  fs::path dir_;
};

TEST_F(NpyTest, NumpyReadsWhatWeWrite) {
  npy::write(dir_ / "f4.npy", std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1e30f}, {2, 3});
  npy::write(dir_ / "f8.npy", std::vector<double>{0.1, 1e300});
  npy::write(dir_ / "i8.npy", std::vector<int64_t>{-5, int64_t(1) << 40, 7});
  npy::write(dir_ / "i4.npy", std::vector<int32_t>{-1, 2}, {2, 1});
  npy::write(dir_ / "u1.npy", std::vector<uint8_t>{0, 1, 255});
  npy::write(dir_ / "empty.npy", std::vector<float>{}, {4, 0});
  ASSERT_TRUE(python(R"(
a = np.load(d + "/f4.npy"); assert a.dtype == np.float32 and a.shape == (2, 3), a
assert (a == np.array([[1.5, -2, 3.25], [0, 7, -1e30]], np.float32)).all(), a
a = np.load(d + "/f8.npy"); assert a.dtype == np.float64 and list(a) == [0.1, 1e300], a
a = np.load(d + "/i8.npy"); assert a.dtype == np.int64 and list(a) == [-5, 1 << 40, 7], a
a = np.load(d + "/i4.npy"); assert a.dtype == np.int32 and a.shape == (2, 1) and list(a[:, 0]) == [-1, 2], a
a = np.load(d + "/u1.npy"); assert a.dtype == np.uint8 and list(a) == [0, 1, 255], a
a = np.load(d + "/empty.npy"); assert a.dtype == np.float32 and a.shape == (4, 0), a
for name in ["f4", "f8", "i8", "i4", "u1", "empty"]:  # format 1.0, the header padded to 64 bytes
    b = open(d + "/" + name + ".npy", "rb").read()
    n = int.from_bytes(b[8:10], "little")
    assert b[:8] == b"\x93NUMPY\x01\x00" and (10 + n) % 64 == 0 and b[10 + n - 1:10 + n] == b"\n", (name, b[:80])
)"));
}

TEST_F(NpyTest, WeReadWhatNumpyWrites) {
  ASSERT_TRUE(python(R"(
np.save(d + "/f4.npy", np.arange(12, dtype=np.float32).reshape(3, 4) / 8)
np.save(d + "/i8.npy", np.array([3, -9], np.int64))
np.save(d + "/scalar.npy", np.float32(2.5))
np.save(d + "/fortran.npy", np.asfortranarray(np.ones((2, 3), np.float32)))
with open(d + "/v2.npy", "wb") as f:  # format 2.0: a 4-byte header length
    np.lib.format.write_array(f, np.array([[1.5, -3]], np.float32), version=(2, 0))
)"));
  std::vector<int64_t> shape;
  const std::vector<float> f = npy::read<float>(dir_ / "f4.npy", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(f.size(), 12u);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i], float(i) / 8) << i;
  EXPECT_EQ(npy::read<int64_t>(dir_ / "i8.npy"), (std::vector<int64_t>{3, -9}));
  EXPECT_EQ(npy::read<float>(dir_ / "scalar.npy", &shape), std::vector<float>{2.5f});
  EXPECT_TRUE(shape.empty());
  EXPECT_NE(error_of_reading("fortran.npy").find("not C order"), std::string::npos);
  EXPECT_EQ(npy::read<float>(dir_ / "v2.npy", &shape), (std::vector<float>{1.5f, -3.0f}));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 2}));
}

TEST_F(NpyTest, BadFilesAndShapesAreErrorsNamingTheFile) {
  npy::write(dir_ / "i8.npy", std::vector<int64_t>{1, 2});
  std::string e = error_of_reading("i8.npy");
  EXPECT_NE(e.find("i8.npy: dtype is not <f4"), std::string::npos) << e;
  std::ofstream(dir_ / "text.npy") << "not numpy at all";
  e = error_of_reading("text.npy");
  EXPECT_NE(e.find("text.npy: not an .npy file"), std::string::npos) << e;
  e = error_of_reading("missing.npy");
  EXPECT_NE(e.find("cannot read"), std::string::npos) << e;
  EXPECT_NE(e.find("missing.npy"), std::string::npos) << e;

  npy::write(dir_ / "whole.npy", std::vector<float>(6, 1.0f), {2, 3});  // truncated below
  fs::resize_file(dir_ / "whole.npy", fs::file_size(dir_ / "whole.npy") - 4);
  e = error_of_reading("whole.npy");
  EXPECT_NE(e.find("whole.npy: 20 bytes of data where its shape needs 24 (short file)"), std::string::npos) << e;
  npy::write(dir_ / "long.npy", std::vector<float>(6, 1.0f), {2, 3});  // 4 bytes more than its shape
  std::ofstream(dir_ / "long.npy", std::ios::app | std::ios::binary).write("abcd", 4);
  e = error_of_reading("long.npy");
  EXPECT_NE(e.find("long.npy: 28 bytes of data where its shape needs 24"), std::string::npos) << e;
  // Hand-written headers: a negative or unreadable dimension, a structured
  // dtype holding <f4, a format this reader does not know.
  const auto header_file = [&](const std::string& name, const std::string& dict, char major = 1) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    std::ofstream f(dir_ / name, std::ios::binary);
    f << "\x93NUMPY" << major << '\0' << char(h.size() & 0xff) << char(h.size() >> 8) << h;
  };
  struct Case {
    const char *name, *dict;
    char major;
    const char* error;
  };
  const char* f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': ";
  for (const Case& c : {Case{"negative.npy", "(-1,), }", 1, "negative.npy: bad shape"},
                        Case{"word.npy", "(2, x), }", 1, "word.npy: bad shape"},
                        Case{"huge.npy", "(4611686018427387904, 4), }", 1, "huge.npy: bad shape"},
                        Case{"v9.npy", "(0,), }", 9, "v9.npy: .npy format 9"}}) {
    header_file(c.name, f4 + std::string(c.dict), c.major);
    e = error_of_reading(c.name);
    EXPECT_NE(e.find(c.error), std::string::npos) << e;
  }
  header_file("record.npy", "{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (0,), }");
  e = error_of_reading("record.npy");
  EXPECT_NE(e.find("record.npy: dtype is not <f4"), std::string::npos) << e;

  try {
    npy::write(dir_ / "wrong.npy", std::vector<float>(5), {2, 3});
    ADD_FAILURE() << "a shape of 6 values for 5 was written";
  } catch (const std::runtime_error& err) {
    EXPECT_NE(std::string(err.what()).find("wrong.npy: shape (2,3) does not hold 5 values"), std::string::npos)
        << err.what();
  }
  EXPECT_THROW(npy::write(dir_ / "no_such_dir" / "x.npy", std::vector<float>{1}), std::runtime_error);
}

}  // namespace
}  // namespace wg
