// Training on an anemoi Zarr store: the shipped config/anemoi_fixture.yml
// on a fixture store written by Python zarr (tests/data/make_anemoi_store.py)
// learns (the loss falls), and NaN targets never reach the loss.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "wg/config/loader.h"
#include "wg/model/checkpoint_plan.h"
#include "wg/train/trainer.h"

namespace wg {
namespace {

namespace fs = std::filesystem;

TEST(AnemoiTraining, LossFallsOnTheFixtureStore) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("wg_anemoi_train_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cmd = std::string(WG_PYTHON3) + " " + WG_SOURCE_DIR + "/tests/data/make_anemoi_store.py " +
                          (dir / "anemoi-fixture.zarr").string() + " --lat 16 --lon 32 > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (needs Debian's python3-zarr: run scripts/setup.sh)";

  ConfigSources src;
  src.files = {std::string(WG_SOURCE_DIR) + "/config/anemoi_fixture.yml"};
  src.overrides = {"data_path=" + dir.string(), "num_mini_epochs=5", "lr_steps_cooldown=20",
                   "loader_num_workers=1"};
  const Config config = load_config(src);
  Trainer trainer(config, resolve_checkpoint_plan(config), torch::kCPU);
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
  fs::remove_all(dir);
}

}  // namespace
}  // namespace wg
