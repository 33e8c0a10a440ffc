// Private to the wgtrain run (run.cpp): its phases, in the order the run
// calls them. Each phase either returns what the next ones need or throws a
// RunError that every rank raises alike (so no rank waits for another in a
// collective).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "wg/config/loader.h"
#include "wg/data/dataset.h"
#include "wg/dist/communicator.h"
#include "wg/dist/context.h"
#include "wg/plan/rank_plan.h"
#include "wg/telemetry/coordinator.h"
#include "wg/telemetry/job_telemetry.h"
#include "wg/train/cli.h"
#include "wg/train/trainer.h"

namespace wg::run {

using Clock = std::chrono::steady_clock;

// Logging, stop signals and the counting allocator, before any tensor exists.
Clock::time_point start_process(const CliOptions& options, const DistContext& dist);

// The configuration, loaded once on every rank; rank 0 reports problems.
LoadedConfig load_configuration(const ConfigSources& sources);

// Every rank opens its data once and checks the model's options against
// the streams' shapes; the ranks agree on the outcome (a store may be
// missing on one node only) and on the training windows.
Dataset open_data(const Config& config, const DistContext& dist);

// Where this rank computes: device, node (with the device's memory), threads.
struct Placement {
  torch::Device device = torch::kCPU;
  NodeInfo node;
  int threads = 1;
};
Placement place_rank(const Config& config, const DistContext& dist);

// The rank's plan (node rules applied), logged as a table; with several
// ranks, one line per rank.
RankPlan plan_rank(const Config& config, const Placement& place, const DistContext& dist);
void log_plans_per_rank(const DistContext& dist, const Placement& place, const RecomputePlan& plan);

// run_root/run_id, with config.yml and plan.txt written by rank 0.
// Also WeatherGenerator's model directory (wg/train/upstream_run.h): its
// .chkpt weights and model_<run_id>_<tag>.json are written beside ours.
struct RunDir {
  std::string run_id;
  std::filesystem::path path;
  std::string upstream_json;   // the configuration as upstream saves it
  int64_t num_mini_epochs = 0;  // the tag of the final save (chkpt<N>)
};
RunDir make_run_dir(const LoadedConfig& loaded, const RecomputePlan& plan, const DistContext& dist);
// Rank 0: the weights upstream would save (the weight average when the run
// keeps one) as {run_id}_{tag}.chkpt with its JSON.
void write_upstream_weights(const RunDir& run, const std::string& tag, Trainer& trainer);
void write_plan(const RunDir& run, const RecomputePlan& plan, const DistContext& dist);

// The communicator (several ranks) and the trainer, initialised from
// --init-weights when given. The communicator outlives the trainer.
struct Training {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Trainer> trainer;
};
Training build_trainer(const Config& config, Dataset data, const RankPlan& plan, const Placement& place,
                       const CliOptions& options, const DistContext& dist);

// --dump-step FILE: rank 0 writes step 0's batch, weights, outputs, loss and
// gradients (docs/step-dump.md); returns the exit code.
int dump_step(const CliOptions& options, const Config& config, Trainer& trainer, const DistContext& dist);

// gradient_checkpointing.policy auto: the fastest plan whose predicted peak
// fits the rank's budget, set on the trainer with an out-of-memory policy
// that knows the measured costs. Every rank stops if one cannot plan.
PlanPrediction plan_automatically(Trainer& trainer, const Config& config, const RankPlan& plan,
                                  const Placement& place, const DistContext& dist);

// Where the step metrics go: the rank-0 coordinator (every rank), the log
// line and metrics.jsonl (rank 0), Prometheus (rank 0, telemetry.enabled).
struct Sinks {
  std::unique_ptr<JobTelemetry> telemetry;
  std::unique_ptr<Coordinator> coordinator;
  std::vector<std::unique_ptr<MetricsSink>> files;
  std::vector<MetricsSink*> all() const;
};
Sinks attach_sinks(const Config& config, const CliOptions& options, const RunDir& run, const Placement& place,
                   const PlanPrediction& prediction, Trainer& trainer, const DistContext& dist);

// Resume from the newest valid checkpoint; stop on a signal or the time
// limit at a step all ranks agree on; save checkpoints.
Trainer::Control resume_and_control(const Config& config, const RunDir& run, Trainer& trainer, Sinks& sinks,
                                    const DistContext& dist, Clock::time_point started);

// Train; a non-finite loss ends the run with exit code 3.
RunSummary train(Trainer& trainer, Sinks& sinks, const Trainer::Control& control);
// Any error once the sinks are attached (resume, training, the final
// weights): the outcome "failed" with where the run continues (the steps
// finished, or before a resume the newest checkpoint's step), pushed by
// rank 0 (wgtrain_job_status, WgtrainJobFailed); the file_sd target removed.
void report_failure(const RunDir& run, Trainer& trainer, Sinks& sinks);

// Weights, the final message, the telemetry outcome.
void finish(const RunDir& run, const RunSummary& summary, Trainer& trainer, Sinks& sinks, const DistContext& dist);

}  // namespace wg::run
