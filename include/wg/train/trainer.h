// One process's training loop: data -> forward (plan applied inside the
// sections) -> masked loss -> backward -> clip -> AdamW with the schedule.
// Produces StepMetrics; knows nothing of where they go.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/dataset.h"
#include "wg/model/checkpoint_plan.h"
#include "wg/model/weather_model.h"
#include "wg/train/loss.h"
#include "wg/train/lr_schedule.h"
#include "wg/train/metrics.h"

namespace wg {

class NonFiniteLossError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Trainer {
 public:
  // Builds model, optimizer, data and schedule. Seeds LibTorch's generator
  // with config.seed first, so the initial weights are reproducible.
  Trainer(const Config& config, const CheckpointPlan& plan, const torch::Device& device, int rank = 0,
          int world = 1);

  int64_t total_steps() const { return dataset_.total_steps(); }

  // One step on the run's own batch for `step`.
  StepMetrics step(int64_t step);
  // One step on a given batch (tests inject batches here).
  StepMetrics step_on(const Batch& batch, int64_t step);

  // All steps; throws NonFiniteLossError per nan_policy.
  RunSummary train(const std::vector<MetricsSink*>& sinks);

  WeatherModel& model() { return model_; }
  torch::optim::AdamW& optimizer() { return *optimizer_; }
  const std::string& device_name() const { return device_name_; }

 private:
  Config config_;
  torch::Device device_;
  std::string device_name_;
  WeatherModel model_{nullptr};
  Dataset dataset_;
  MaskedLoss loss_;
  LrSchedule schedule_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::vector<torch::Tensor> params_;
  int consecutive_skips_ = 0;
};

}  // namespace wg
