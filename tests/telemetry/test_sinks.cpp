// The rank-0 sinks: metrics.jsonl carries every StepMetrics field as JSON
// (non-finite numbers as null, so every line parses), summary.json every
// RunSummary field and the planner's prediction.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "wg/telemetry/sinks.h"

namespace wg {
namespace {

namespace fs = std::filesystem;

StepMetrics sample_step() {
  StepMetrics m;
  m.step = 4;
  m.total_steps = 10;
  m.loss = 0.25;
  m.lr = 1e-4;
  m.grad_norm = 1.5;
  m.step_seconds = 0.5;
  m.compute_seconds = 0.4;
  m.start_bytes = 1000;
  m.data_seconds = 0.1;
  m.skipped_samples = 2;
  m.samples_per_second = 4;
  m.tokens_per_second = 400;
  m.peak_bytes = 5000;
  m.peak_reserved_bytes = 6000;
  m.activation_bytes = 3000;
  m.nonfinite_loss = false;
  m.skipped = false;
  m.oom_retries = 1;
  return m;
}

TEST(Sinks, StepRecordHasEveryField) {
  const auto j = nlohmann::json::parse(to_json(sample_step()));
  for (const char* key : {"step", "total_steps", "loss", "lr", "grad_norm", "step_seconds", "compute_seconds",
                          "start_bytes", "data_seconds", "skipped_samples", "samples_per_second", "tokens_per_second",
                          "model_flops", "model_flops_per_second", "mfu",
                          "peak_bytes", "peak_reserved_bytes", "activation_bytes", "nonfinite_loss", "skipped",
                          "oom_retries"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_FALSE(j.contains("validation_loss"));  // only after a validation
  EXPECT_EQ(j["step"], 4);
  EXPECT_EQ(j["compute_seconds"], 0.4);
  EXPECT_EQ(j["start_bytes"], 1000);
  EXPECT_EQ(j["peak_reserved_bytes"], 6000);
  EXPECT_EQ(j["oom_retries"], 1);
  EXPECT_TRUE(j["mfu"].is_null());  // no peak known
  StepMetrics f = sample_step();
  f.model_flops = 3e9;
  f.peak_flops = 2e10;
  const auto jf = nlohmann::json::parse(to_json(f));
  EXPECT_DOUBLE_EQ(jf["model_flops_per_second"].get<double>(), 3e9 / f.step_seconds);
  EXPECT_DOUBLE_EQ(jf["mfu"].get<double>(), 3e9 / f.step_seconds / 2e10);
  StepMetrics v = sample_step();
  v.validation_loss = 0.75;
  EXPECT_EQ(nlohmann::json::parse(to_json(v))["validation_loss"], 0.75);
}

TEST(Sinks, NonFiniteLossIsNullNotInvalidJson) {
  StepMetrics m = sample_step();
  m.loss = std::nan("");
  m.nonfinite_loss = true;
  m.skipped = true;
  const auto j = nlohmann::json::parse(to_json(m));
  EXPECT_TRUE(j["loss"].is_null());
  EXPECT_EQ(j["nonfinite_loss"], true);
  EXPECT_EQ(j["skipped"], true);
}

TEST(Sinks, JsonlAndSummaryFiles) {
  const fs::path dir = fs::temp_directory_path() / ("wg_sinks_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    JsonlSink sink(dir.string(), 5, PlanPrediction{123456, 0.25});
    for (int k = 0; k < 10; ++k) {
      StepMetrics m = sample_step();
      m.step = k;
      if (k == 6) m.validation_loss = 0.5;  // recorded although step 7 is not due
      sink.on_step(m);
    }
    RunSummary s;
    s.steps = 10;
    s.next_step = 10;
    s.stopped_early = false;
    sink.on_end(s);
  }
  std::ifstream lines(dir / "metrics.jsonl");
  std::vector<int64_t> steps;
  for (std::string line; std::getline(lines, line);) steps.push_back(nlohmann::json::parse(line)["step"]);
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 6, 9}));
  std::ifstream summary_file(dir / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["steps"], 10);
  EXPECT_EQ(summary["next_step"], 10);
  EXPECT_EQ(summary["stopped_early"], false);
  EXPECT_EQ(summary["planned_peak_bytes"], 123456);
  EXPECT_EQ(summary["planned_added_seconds"], 0.25);
  fs::remove_all(dir);
}

// Per-channel losses go to metrics.jsonl under upstream's keys, averaged
// over the steps of the window that had data (NaN steps left out), the
// stream's loss_avg the mean over its channels; a stream without data in the
// whole window is null.
TEST(Sinks, ChannelLossesUnderUpstreamKeys) {
  const fs::path dir = fs::temp_directory_path() / ("wg_sinks_losses_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  StepLossNames names;
  names.streams = {"ERA5", "SYNOP"};
  names.channel_loss_keys = {"ERA5.mse", "SYNOP.mse"};
  names.channels = {{"2t", "10u"}, {"obsvalue_t2m_0"}};
  const double nan = std::nan("");
  {
    JsonlSink sink(dir.string(), 2, PlanPrediction{}, names);
    StepMetrics a = sample_step(), b = sample_step();
    a.step = 0;
    b.step = 1;
    a.total_steps = b.total_steps = 10;
    a.channel_losses = {{1.0, 3.0}, {nan}};
    b.channel_losses = {{2.0, nan}, {nan}};
    sink.on_step(a);
    sink.on_step(b);  // due: (1 + 1) % 2 == 0
  }
  std::ifstream lines(dir / "metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["step"], 1);
  EXPECT_DOUBLE_EQ(j["loss.LossPhysical.ERA5.mse.2t"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["loss.LossPhysical.ERA5.mse.10u"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j["loss.LossPhysical.ERA5.mse.loss_avg"].get<double>(), 2.25);
  EXPECT_TRUE(j["loss.LossPhysical.SYNOP.mse.obsvalue_t2m_0"].is_null()) << line;
  EXPECT_TRUE(j["loss.LossPhysical.SYNOP.mse.loss_avg"].is_null()) << line;
  EXPECT_FALSE(std::getline(lines, line));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace wg
