// One rank's training loop: data (this rank's shard) -> forward (plan
// applied inside the sections) -> masked loss -> backward with gradient
// averaging across ranks overlapped (dist/grad_sync) -> clip -> AdamW with
// the schedule. Produces StepMetrics; knows nothing of where they go.
// Without a DistContext it is a single process.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/dataset.h"
#include "wg/dist/communicator.h"
#include "wg/dist/context.h"
#include "wg/dist/grad_sync.h"
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
  // with config.seed first, so the initial weights are reproducible. With
  // `dist` and `comm` (several ranks), rank 0's weights are broadcast and
  // gradients are averaged every step; the plan may differ per rank.
  Trainer(const Config& config, const CheckpointPlan& plan, const torch::Device& device,
          const DistContext* dist = nullptr, Communicator* comm = nullptr);
  ~Trainer();

  int64_t total_steps() const { return dataset_.total_steps(); }

  // One step on the run's own batch for `step`.
  StepMetrics step(int64_t step);
  // One step on a given batch (tests inject batches here).
  StepMetrics step_on(const Batch& batch, int64_t step);

  // All steps; throws NonFiniteLossError per nan_policy.
  RunSummary train(const std::vector<MetricsSink*>& sinks);

  int rank() const { return rank_; }
  int world() const { return world_; }
  const GradSync* grad_sync() const { return grad_sync_.get(); }
  WeatherModel& model() { return model_; }
  torch::optim::AdamW& optimizer() { return *optimizer_; }
  const std::string& device_name() const { return device_name_; }

 private:
  Config config_;
  const DistContext* dist_;
  int rank_, world_;
  torch::Device device_;
  std::string device_name_;
  WeatherModel model_{nullptr};
  Dataset dataset_;
  MaskedLoss loss_;
  LrSchedule schedule_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<GradSync> grad_sync_;
  int consecutive_skips_ = 0;
};

}  // namespace wg
