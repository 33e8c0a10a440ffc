// One rank's training loop: data (this rank's shard, prepared ahead by the
// loader) -> forward (the plan applied inside the sections) -> LossPhysical
// -> backward with gradient averaging across ranks overlapped
// (dist/grad_sync) -> clip -> AdamW with upstream's schedule and β1 -> the
// weight average (EMA). Produces StepMetrics; knows nothing of where they
// go. Without a DistContext it is a single process.
//
// The trainer applies a recomputation plan and, when a step runs out of
// memory, asks its out-of-memory handler (wg/plan/oom_policy.h) for the plan
// to retry with; choosing plans, costs and budgets is wg/plan's business.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/dataset.h"
#include "wg/data/loader.h"
#include "wg/dist/communicator.h"
#include "wg/dist/context.h"
#include "wg/dist/grad_sync.h"
#include "wg/model/flops.h"
#include "wg/model/weather_model.h"
#include "wg/plan/auto_plan.h"
#include "wg/plan/cost_profile.h"
#include "wg/plan/oom_policy.h"
#include "wg/plan/recompute_plan.h"
#include "wg/telemetry/step_metrics.h"
#include "wg/train/ema.h"
#include "wg/train/fused_adamw.h"
#include "wg/train/loss.h"
#include "wg/train/loss_scaler.h"
#include "wg/train/lr_schedule.h"

namespace wg {

class NonFiniteLossError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Trainer {
 public:
  // `data`: the run's dataset for this rank, opened and checked once by the
  // caller; the trainer owns it from now on. Builds model, optimizer,
  // schedule and weight average; seeds LibTorch's generator with
  // config.seed first, so the initial weights are reproducible. With `dist`
  // and `comm` (several ranks), rank 0's weights are broadcast and
  // gradients are averaged every step; the plan may differ per rank.
  Trainer(const Config& config, Dataset data, const RecomputePlan& plan, const torch::Device& device,
          const DistContext* dist = nullptr, Communicator* comm = nullptr);
  ~Trainer();

  int64_t total_steps() const { return dataset_.total_steps(); }
  BuiltBatch batch(int64_t step) const { return dataset_.batch(step); }
  // What the memory planner profiles: of the first kPlanningBatches
  // batches (all, where there are fewer), the one with the most tokens
  // (token_count: the source tokens; the first of equals), and its step.
  // At cpu_wide a step's peak grew with its tokens (eight batches of
  // 112-161 tokens peaked at 789-916 MiB, in the tokens' order), so a plan
  // made on it fits the batches it was chosen from; step 0's batch alone
  // was 5-6 % under the others' peaks. A heuristic: masking moves tokens
  // from the source to the targets, whose rows drive the decoder's
  // memory, so a batch with fewer tokens may still peak higher (at cpu_tiny
  // by 10 %): the planner checks its plan on every candidate
  // (wg/plan/auto_plan.h). Building the candidates counts their skipped
  // samples once more (as step 0's always was).
  static constexpr int64_t kPlanningBatches = 8;
  int64_t planning_step() const { return planning_choice().first; }
  BuiltBatch planning_batch() const { return planning_choice().second; }
  // The batches it chooses from, in step order (planning_batch_count of
  // them); a plan is checked on each.
  int64_t planning_batch_count() const { return std::max<int64_t>(1, std::min(kPlanningBatches, total_steps())); }
  std::vector<BuiltBatch> planning_candidates() const;

  // One step on the run's own batch for `step`, prepared ahead by the
  // loader (loader_num_workers); its data_seconds is the time it waited.
  StepMetrics step(int64_t step);
  // One step on a given batch (tests inject batches here).
  StepMetrics step_on(const BuiltBatch& batch, int64_t step);

  // The mean validation loss over the validation batches (all ranks), in
  // eval mode without gradients, on the weight average when
  // validate_with_ema; < 0 when there is no validation. Collective: every
  // rank calls it at the same point. Leaves the random generator as it
  // found it, so training is the same with and without validation. `pass`:
  // the validation pass (after mini-epoch `pass`), whose samples and masks
  // it takes (wg/data/dataset.h).
  double validate(int64_t pass = 0);

  // Forward and backward on `batch` without exchanging gradients or
  // updating weights (the cost profiler's probe); gradients are set to none
  // after. Returns the peak bytes above those held at its start.
  int64_t probe(const BuiltBatch& batch, PieceObserver* observer);
  // probe(batch, nullptr) on each of `batches`: the highest peak, or -1
  // where one ran out of memory (its graph released, as after a step that
  // ran out; the rest not probed).
  int64_t probe_peak_or_oom(const std::vector<BuiltBatch>& batches);
  // Bytes held at the start of a step once training runs: now, less any
  // gradients (a step sets them to none first; its peak counts them), plus
  // AdamW's moments if not allocated yet.
  int64_t steady_base_bytes() const;

  // The plan in use; changes only between steps (planner, OOM fallback).
  const RecomputePlan& plan() const { return plan_; }
  void set_plan(const RecomputePlan& plan);
  // Asked on every rank, with the same step and attempt, when some rank ran
  // out of memory in a step: returns the plan to retry with, or throws to
  // give up. Default: OomPolicy(oom_max_retries) without measured costs.
  using OomHandler = std::function<RecomputePlan(const RecomputePlan& current, const OomEvent& event)>;
  void on_out_of_memory(OomHandler handler) { oom_handler_ = std::move(handler); }
  int oom_events() const { return oom_events_; }  // plan changes after running out of memory

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

  // Where a run continues after the steps train() finished so far (its
  // first step before any): after a failure, how far the run got.
  int64_t next_step() const { return next_step_; }

  // The names of StepMetrics' per-stream and per-channel losses.
  const StepLossNames& loss_names() const { return loss_names_; }

  int rank() const { return rank_; }
  int world() const { return world_; }
  const GradSync* grad_sync() const { return grad_sync_.get(); }
  const Dataset& dataset() const { return dataset_; }
  WeatherModel& model() { return model_; }
  FusedAdamW& optimizer() { return *optimizer_; }
  const LrSchedule& schedule() const { return schedule_; }
  // The dynamic loss scaler (disabled unless loss_scaling asks for it).
  LossScaler& loss_scaler() { return scaler_; }
  // The weight average (null without validate_with_ema).
  WeightAverage* weight_average() { return ema_.get(); }
  const std::string& device_name() const { return device_name_; }
  const torch::Device& device() const { return device_; }
  int64_t parameter_count() const;
  // The model's FLOPs on `batch` as this trainer runs them: on the CPU its
  // attention cores run again as the kernel's joint passes (flops.h).
  ModelFlops flops_of(const ModelBatch& batch) const;
  // The peak FLOP/s each step's MFU is measured against (0: none).
  void set_peak_flops(double flops) { peak_flops_ = flops; }

  // Forward on `batch` and its training loss, the per-stream losses in
  // `m` when given (undefined loss: no stream had data).
  torch::Tensor training_loss(const ModelBatch& batch, StepMetrics* m = nullptr);

 private:
  std::pair<int64_t, BuiltBatch> planning_choice() const;  // planning_step and its batch, each batch built once

  Config config_;
  const DistContext* dist_;
  int rank_, world_;
  torch::Device device_;
  std::string device_name_;
  Dataset dataset_;
  ModelOptions model_options_;  // what the model was built from (the FLOP count reads it)
  WeatherModel model_{nullptr};
  BatchLoader loader_;  // after dataset_: its workers read it until they are joined
  PhysicalLoss loss_, validation_loss_;
  StepLossNames loss_names_;
  LrSchedule schedule_;
  AdamConstants adam_;
  LossScaler scaler_;
  std::unique_ptr<FusedAdamW> optimizer_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<WeightAverage> ema_;
  std::unique_ptr<GradSync> grad_sync_;
  RecomputePlan plan_;
  double peak_flops_ = 0;
  OomHandler oom_handler_;
  int oom_events_ = 0;
  int consecutive_skips_ = 0;
  int64_t next_step_ = 0;
  double sync_wait_seconds_ = 0;  // this step's time in any_rank

  // The same answer on every rank; the time it waited counts in the step's
  // sync_wait_seconds.
  bool any_rank(bool flag);
  // One attempt at forward and backward; returns whether some rank ran out
  // of memory (then every rank retries). Sets m.skipped on a skipped step.
  bool attempt_step(const ModelBatch& batch, StepMetrics& m, std::string& oom_what);
  void optimizer_step(StepMetrics& m);
  // A non-finite loss or gradient on some rank, every rank together: throws
  // NonFiniteLossError (`what` under nan_policy error; too many in a row),
  // else marks the step skipped and logs `skipped`.
  void skip_nonfinite(StepMetrics& m, const std::string& what, const char* skipped);
};

// The trainer as the automatic planner's probe (wg/plan/cost_profile.h),
// on the run's planning batch.
class TrainerProbe : public PlanProbe {
 public:
  explicit TrainerProbe(Trainer& trainer);
  const RecomputePlan& plan() const override { return trainer_.plan(); }
  void set_plan(const RecomputePlan& plan) override { trainer_.set_plan(plan); }
  int64_t probe(PieceObserver* observer) override { return trainer_.probe(batch_, observer); }
  int64_t probe_check_batches() override { return trainer_.probe_peak_or_oom(candidates_); }
  double rerun_share(const PieceKey& key) const override;
  double lean_share(const PieceKey& key) const override;
  int64_t current_bytes() const override;
  int64_t steady_base_bytes() const override { return trainer_.steady_base_bytes(); }
  const BuiltBatch& batch() const { return batch_; }  // the batch it profiles (Trainer::planning_batch)

 private:
  Trainer& trainer_;
  std::vector<BuiltBatch> candidates_;  // Trainer::planning_candidates
  BuiltBatch batch_;
  std::map<std::string, double> rerun_share_, lean_share_;  // by piece key, from the FLOP count of batch_
};

// gradient_checkpointing.policy auto on this rank: measures the costs with
// the trainer as probe, chooses the plan for `budget_bytes` (keeping the
// sections `rules` sets), sets it on the trainer with an out-of-memory
// policy that knows the measured costs and the budget. Throws
// std::invalid_argument when the budget is below the all-recompute peak.
AutoPlan apply_auto_plan(Trainer& trainer, int64_t budget_bytes, const RankPlan& rules, int oom_max_retries);

}  // namespace wg
