// Reading where a run continues from its checkpoint directories' names
// (train_checkpoint.h), without loading any: what a failed resume reports
// as wgtrain_job_last_step. Saving and resuming themselves run in
// tests/dist (two ranks) and tests/train/resume_test.sh (wgtrain).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "wg/train/train_checkpoint.h"

namespace wg {
namespace {

namespace fs = std::filesystem;

struct RunDirectory {
  fs::path path = fs::temp_directory_path() / ("wg_train_checkpoint_" + std::to_string(::getpid()));
  RunDirectory() { fs::remove_all(path); }
  ~RunDirectory() { fs::remove_all(path); }
  void make(const std::string& name) const { fs::create_directories(path / "checkpoints" / name); }
};

TEST(NewestCheckpointStep, IsTheNewestCompleteCheckpointsStep) {
  const RunDirectory run;
  EXPECT_EQ(newest_checkpoint_step(run.path.string()), std::nullopt);  // no run directory yet
  fs::create_directories(run.path / "checkpoints");
  EXPECT_EQ(newest_checkpoint_step(run.path.string()), std::nullopt);  // no checkpoint yet
  run.make("step_0000000005");
  run.make("step_0000000012");
  run.make("step_0000000020.tmp");  // a checkpoint still being written is not one
  EXPECT_EQ(newest_checkpoint_step(run.path.string()), std::optional<int64_t>(12));
  run.make("step_0000000100");
  EXPECT_EQ(newest_checkpoint_step(run.path.string()), std::optional<int64_t>(100));
}

}  // namespace
}  // namespace wg
