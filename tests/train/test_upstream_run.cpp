// WeatherGenerator's model directory (src/train/upstream_run.cpp): the files
// written beside a run's own, and which file --init-weights takes from a
// directory.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "wg/io/chkpt.h"
#include "wg/io/weights.h"
#include "wg/train/upstream_run.h"

namespace fs = std::filesystem;

namespace wg {
namespace {

class UpstreamRun : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("wg_upstream_run_" + std::to_string(::getpid()));
  void SetUp() override {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void touch(const fs::path& p) { std::ofstream(p) << "x"; }
};

TEST_F(UpstreamRun, TagsAreUpstreams) {
  EXPECT_EQ(upstream_tag(-1), "latest");
  EXPECT_EQ(upstream_tag(0), "chkpt00000");
  EXPECT_EQ(upstream_tag(32), "chkpt00032");
}

TEST_F(UpstreamRun, WritesTheWeightsAndTheConfigAsUpstreamNamesThem) {
  torch::nn::Linear model(3, 2);
  write_upstream_model(dir / "abc", "abc", "chkpt00004", *model, R"({"run_id": "abc"})");
  const auto file = (dir / "abc/abc_chkpt00004.chkpt").string();
  const SafetensorsFile read = read_chkpt(file);
  ASSERT_EQ(read.tensors.size(), 2u);
  EXPECT_EQ(read.tensors[0].name, "weight");
  EXPECT_EQ(read.tensors[1].name, "bias");
  EXPECT_TRUE(torch::equal(to_tensor(read.tensors[0]), model->weight));
  EXPECT_EQ(saved_config_of(file), (dir / "abc/model_abc_chkpt00004.json").string());
  std::ifstream json(saved_config_of(file));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(json), {}), R"({"run_id": "abc"})");
  EXPECT_EQ(saved_config_of((dir / "abc/weights.safetensors").string()), "");
}

TEST_F(UpstreamRun, InitWeightsTakesADirectorysNewestCheckpoint) {
  const fs::path run = dir / "r1";
  fs::create_directories(run);
  EXPECT_THROW(
      {
        try {
          weights_file_in(run.string());
        } catch (const std::runtime_error& e) {
          EXPECT_EQ(std::string(e.what()), run.string() + ": no weights in this run directory: looked for "
                                                          "r1_latest.chkpt, r1_chkpt<NNNNN>.chkpt and "
                                                          "weights.safetensors");
          throw;
        }
      },
      std::runtime_error);
  touch(run / "weights.safetensors");
  EXPECT_EQ(weights_file_in(run.string()), (run / "weights.safetensors").string());
  touch(run / "r1_chkpt00003.chkpt");
  touch(run / "r1_chkpt00010.chkpt");
  touch(run / "r1_epoch00002.chkpt");  // upstream's older name
  touch(run / "other_chkpt00099.chkpt");
  EXPECT_EQ(weights_file_in(run.string()), (run / "r1_chkpt00010.chkpt").string());
  EXPECT_EQ(weights_file_in(run.string() + "/"), (run / "r1_chkpt00010.chkpt").string());
  touch(run / "r1_latest.chkpt");
  EXPECT_EQ(weights_file_in(run.string()), (run / "r1_latest.chkpt").string());
  // A file is taken as given.
  EXPECT_EQ(weights_file_in((run / "r1_chkpt00003.chkpt").string()), (run / "r1_chkpt00003.chkpt").string());
}

}  // namespace
}  // namespace wg
