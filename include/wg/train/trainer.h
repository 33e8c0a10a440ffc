// One rank's training loop: data (this rank's shard) -> forward (plan
// applied inside the sections) -> masked loss -> backward with gradient
// averaging across ranks overlapped (dist/grad_sync) -> clip -> AdamW with
// the schedule. Produces StepMetrics; knows nothing of where they go.
// Without a DistContext it is a single process.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/dataset.h"
#include "wg/data/loader.h"
#include "wg/dist/communicator.h"
#include "wg/dist/context.h"
#include "wg/dist/grad_sync.h"
#include "wg/model/checkpoint_plan.h"
#include "wg/model/memory_planner.h"
#include "wg/model/piece.h"
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
  Batch batch(int64_t step) const { return dataset_.batch(step); }
  // What the memory planner profiles: step 0's samples at the planning
  // masking rate (see Dataset::planning_masking_rate).
  Batch planning_batch() const { return dataset_.batch(0, dataset_.planning_masking_rate()); }

  // One step on the run's own batch for `step`, prepared ahead by the
  // loader (loader_num_workers); its data_seconds is the time it waited.
  StepMetrics step(int64_t step);
  // One step on a given batch (tests inject batches here).
  StepMetrics step_on(const Batch& batch, int64_t step);

  // The mean masked loss over the validation set (Dataset::validation_batch,
  // all ranks), in eval mode without gradients; < 0 when there is no
  // validation set. Collective: every rank calls it at the same point.
  // Leaves the random generator as it found it, so training is the same
  // with and without validation.
  double validate();

  // Forward and backward on `batch` without exchanging gradients or
  // updating weights (the cost profiler's probe); gradients are zeroed
  // after. Returns the peak bytes above those held at its start.
  int64_t probe(const Batch& batch, PieceObserver* observer);
  // Bytes held at the start of a step once training runs: now, plus
  // gradients and AdamW moments not allocated yet.
  int64_t steady_base_bytes() const;

  // The plan in use; changes only between steps (planner, OOM fallback).
  const CheckpointPlan& plan() const { return plan_; }
  void set_plan(const CheckpointPlan& plan);
  // Measured costs guide the out-of-memory fallback; `budget` is quoted in
  // its final error.
  void set_costs(const CostModel& costs, const std::string& budget) {
    costs_ = costs;
    budget_text_ = budget;
  }
  // The planner's prediction, reported in the run summary.
  void set_prediction(int64_t peak_bytes, double added_seconds) {
    planned_peak_bytes_ = peak_bytes;
    planned_added_seconds_ = added_seconds;
  }
  int oom_events() const { return oom_events_; }

  // When to stop early and what to do at checkpoints; all optional.
  struct Control {
    int64_t first_step = 0;                       // resume here
    std::function<bool()> stop;                   // asked after every step; must agree across ranks
    int checkpoint_every = 0;                     // 0: no periodic checkpoints
    std::function<void(int64_t next_step)> checkpoint;  // also called when stopping early
  };
  // The steps from control.first_step on; throws NonFiniteLossError per nan_policy.
  RunSummary train(const std::vector<MetricsSink*>& sinks, const Control& control);
  RunSummary train(const std::vector<MetricsSink*>& sinks) { return train(sinks, Control{}); }

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
  BatchLoader loader_;  // after dataset_: its workers read it until they are joined
  MaskedLoss loss_;
  LrSchedule schedule_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<GradSync> grad_sync_;
  CheckpointPlan plan_;
  std::optional<CostModel> costs_;
  std::string budget_text_ = "none (manual plan)";
  int oom_events_ = 0;
  int64_t planned_peak_bytes_ = 0;
  double planned_added_seconds_ = 0;
  int consecutive_skips_ = 0;

  bool any_rank(bool flag) const;  // the same answer on every rank
  // Forward on `input` and the masked loss against its targets (NaN-free: validity applied).
  torch::Tensor masked_loss(const ModelInput& input);
  void recompute_one_more_piece(int64_t step, const std::string& what);
};

}  // namespace wg
