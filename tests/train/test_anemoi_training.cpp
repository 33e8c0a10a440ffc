// Training on an anemoi Zarr store: the shipped config/anemoi_fixture.yml
// on a fixture store written by Python zarr (tests/data/make_anemoi_store.py)
// learns (training and validation losses fall), NaN targets never reach the
// loss, and validation after each mini-epoch leaves training unchanged.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "wg/config/loader.h"
#include "wg/plan/recompute_plan.h"
#include "wg/telemetry/sinks.h"
#include "wg/train/trainer.h"

namespace wg {
namespace {

namespace fs = std::filesystem;

class AnemoiTraining : public ::testing::Test {
 protected:
  static inline fs::path dir;
  static void SetUpTestSuite() {
    dir = fs::path(::testing::TempDir()) / ("wg_anemoi_train_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string cmd = std::string(WG_PYTHON3) + " " + WG_SOURCE_DIR + "/tests/data/make_anemoi_store.py " +
                            (dir / "anemoi-fixture.zarr").string() + " --lat 16 --lon 32 > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (needs Debian's python3-zarr: run scripts/setup.sh)";
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  // The shipped config/anemoi_fixture.yml on the fixture store, with overrides.
  static Config config(std::vector<std::string> overrides) {
    ConfigSources src;
    src.files = {std::string(WG_SOURCE_DIR) + "/config/anemoi_fixture.yml"};
    src.overrides = {"data_path=" + dir.string(), "lr_steps_cooldown=20"};
    src.overrides.insert(src.overrides.end(), overrides.begin(), overrides.end());
    return load_config(src);
  }
};

// Records what train() reports.
struct Recorder : MetricsSink {
  std::vector<double> losses, validation;
  void on_step(const StepMetrics& m) override {
    losses.push_back(m.loss);
    if (m.validation_loss >= 0) validation.push_back(m.validation_loss);
  }
  void on_end(const RunSummary&) override {}
};

TEST_F(AnemoiTraining, LossFallsOnTheFixtureStore) {
  const Config config = AnemoiTraining::config({"num_mini_epochs=5", "loader_num_workers=1"});
  Trainer trainer(config, Dataset(config, 0, 1), resolve_plan(config), torch::kCPU);
  const double validation_before = trainer.validate();
  std::vector<double> losses;
  for (int64_t step = 0; step < trainer.total_steps(); ++step) {
    const StepMetrics m = trainer.step(step);
    ASSERT_TRUE(std::isfinite(m.loss)) << "step " << step << ": NaN data reached the loss";
    losses.push_back(m.loss);
  }
  ASSERT_GE(losses.size(), 100u);
  const auto mean = [](auto a, auto b) { return std::accumulate(a, b, 0.0) / double(b - a); };
  const double first = mean(losses.begin(), losses.begin() + 12), last = mean(losses.end() - 12, losses.end());
  EXPECT_LT(last, 0.8 * first) << "first 12 steps " << first << ", last 12 " << last;
  const double validation_after = trainer.validate();
  EXPECT_LT(validation_after, 0.8 * validation_before) << "on windows of the validation period, never trained on";
}

TEST_F(AnemoiTraining, ValidationRunsEveryMiniEpochAndChangesNoTraining) {
  std::vector<Recorder> runs(2);
  for (int with = 0; with < 2; ++with) {
    const Config config = AnemoiTraining::config(
        {"num_mini_epochs=2", "samples_per_mini_epoch=32", "lr_steps_cooldown=2", "lr_steps_warmup=2",
         "samples_per_validation=" + std::to_string(with ? 16 : 0), "embed_dropout_rate=0.1"});
    Trainer trainer(config, Dataset(config, 0, 1), resolve_plan(config), torch::kCPU);
    trainer.train({&runs[size_t(with)]});
  }
  EXPECT_TRUE(runs[0].validation.empty());
  ASSERT_EQ(runs[1].validation.size(), 2u) << "one validation per mini-epoch";
  EXPECT_EQ(runs[1].losses, runs[0].losses) << "validation must not change training (dropout on)";
}

}  // namespace
}  // namespace wg
