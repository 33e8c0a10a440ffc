// Files written whole or not at all: a write replaces the file, a writer
// that fails leaves the old file and no temporary one, and errors name the
// file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "wg/util/atomic_file.h"

namespace wg {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("wg_atomic_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  // Everything in dir but `keep`.
  size_t others(const fs::path& keep) const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path() != keep;
    return n;
  }
  fs::path dir;
};

TEST_F(AtomicFile, WritesAndReplacesWholeFiles) {
  const fs::path f = dir / "a.json";
  write_file_atomically(f.string(), std::string("first"));
  EXPECT_EQ(slurp(f), "first");
  write_file_atomically(f.string(), [](std::ostream& out) { out << "second, " << 2; });
  EXPECT_EQ(slurp(f), "second, 2");
  write_file_atomically(f.string(), std::string());
  EXPECT_EQ(slurp(f), "");
  EXPECT_EQ(others(f), 0u);  // no temporary file left
}

TEST_F(AtomicFile, AWriterThatFailsLeavesTheOldFile) {
  const fs::path f = dir / "a.json";
  write_file_atomically(f.string(), std::string("old"));
  EXPECT_THROW(write_file_atomically(f.string(),
                                     [](std::ostream& out) {
                                       out << "half of it";
                                       throw std::logic_error("the writer failed");
                                     }),
               std::logic_error);
  EXPECT_EQ(slurp(f), "old");
  EXPECT_EQ(others(f), 0u);
}

TEST_F(AtomicFile, ErrorsNameTheFile) {
  const fs::path f = dir / "no_such_dir" / "a.json";
  try {
    write_file_atomically(f.string(), std::string("x"));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(f.string() + ": cannot create"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(f));
}

}  // namespace
}  // namespace wg
