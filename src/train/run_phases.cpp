// The phases of the wgtrain run (see run_phases.h).
#include "train/run_phases.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>

#include "wg/data/pipeline_error.h"
#include "wg/dist/devices.h"
#include "wg/io/weights.h"
#include "wg/model/model_options.h"
#include "wg/plan/auto_plan.h"
#include "wg/telemetry/sinks.h"
#include "wg/train/run_error.h"
#include "wg/train/step_dump.h"
#include "wg/train/stop_request.h"
#include "wg/train/train_checkpoint.h"
#include "wg/train/upstream_run.h"
#include "wg/util/atomic_file.h"
#include "wg/util/logging.h"
#include "wg/util/memory.h"
#include "wg/util/onednn_sgemm.h"
#include "wg/util/peak_flops.h"
#include "wg/util/threads.h"
#include "wg/util/units.h"

namespace wg::run {

namespace fs = std::filesystem;

namespace {

std::string new_run_id() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%04x", unsigned(std::random_device{}() & 0xffff));
  return std::string(stamp) + "-" + suffix;
}

void write_text(const fs::path& path, const std::string& text) { write_file_atomically(path.string(), text); }

torch::Device rank_device(const Config& config, const NodeInfo& node) {
  if (config.device == "cpu") return torch::kCPU;
  const bool cuda = torch::cuda::is_available();
  if (config.device == "cuda" && !cuda)
    throw RunError(2, "configuration: device: cuda requested but no CUDA device is usable");
  if (!cuda) return torch::kCPU;
  return torch::Device(torch::kCUDA, device_for_local_rank(node.local_rank, cuda_device_count()));
}

// Every rank raises together when any rank failed; `speak` decides who logs.
[[noreturn]] void fail_together(const std::string& message, bool speak) {
  throw RunError(2, speak ? message : "", RunError::Scope::EveryRankOwn);
}

// Rank 0, on resuming: the run's resumes so far, this one included, kept in
// <run>/resumes (a new process of the run starts its counters at 0).
int64_t count_resume(const fs::path& run_dir) {
  int64_t before = 0;
  std::ifstream(run_dir / "resumes") >> before;
  write_file_atomically((run_dir / "resumes").string(), std::to_string(before + 1) + "\n");
  return before + 1;
}

// Every rank calls this at the same point with its own error ("" for none).
// When any rank has one, every rank raises together, so that none waits in a
// later collective for a rank that left: rank 0 speaks for an error it has
// (every rank has the same one, as a bad configuration), a rank whose error
// rank 0 does not have speaks for itself (its log lines name its rank).
void fail_if_any(const std::string& error, const DistContext& dist) {
  const bool failed = !error.empty(), lead = dist.rank() == 0;
  const bool any_failed = dist.size() > 1 ? dist.allreduce_max(failed ? 1 : 0) > 0 : failed;
  if (!any_failed) return;
  const bool lead_failed = dist.size() > 1 ? dist.allreduce_max(lead && failed ? 1 : 0) > 0 : failed;
  fail_together(error, failed && (lead || !lead_failed));
}

}  // namespace

Clock::time_point start_process(const CliOptions& options, const DistContext& dist) {
  setup_logging(options.log_level, dist.size() > 1 ? dist.rank() : -1);
  install_stop_handlers();       // USR1 / TERM: stop at the next step, save, exit 0 (idempotent)
  install_counting_allocator();  // before any tensor exists
  return Clock::now();
}

LoadedConfig load_configuration(const ConfigSources& sources) {
  try {
    return load_run_config(sources);
  } catch (const ConfigError& e) {  // the same on every rank: rank 0 reports
    std::string text = "configuration has " + std::to_string(e.problems().size()) + " problem(s):";
    for (const auto& p : e.problems()) text += "\n  " + p;
    throw RunError(2, text);
  }
}

Dataset open_data(const Config& config, const DistContext& dist) {
  const bool lead = dist.rank() == 0;
  std::string error;
  std::optional<Dataset> data;
  try {
    data.emplace(config, dist.rank(), dist.size());
    // The model's options from the config and the streams' shapes: what
    // only the data tells (a stream's read-out width) is checked here,
    // before anything is built and before --print-plan returns.
    model_options(config, data->stream_shapes());
  } catch (const PipelineError& e) {  // names stream, file and key
    error = std::string("data: ") + e.what();
  } catch (const std::invalid_argument& e) {  // a world size, or a model, the configuration cannot use
    error = std::string("configuration: ") + e.what();
  }
  fail_if_any(error, dist);
  // Every rank must see the same training windows, or shards overlap.
  const double windows = double(data->windows());
  const double most = dist.allreduce_max(windows), fewest = -dist.allreduce_max(-windows);
  if (most != fewest)
    fail_together("data: the ranks see " + std::to_string(int64_t(fewest)) + " to " + std::to_string(int64_t(most)) +
                      " training windows: their copies of the stores differ (check data_path / WG_DATA_PATH on "
                      "every node)",
                  lead);
  if (lead && !data->summary().empty()) spdlog::info("{}", data->summary());
  if (lead)
    for (const auto& w : data->warnings()) spdlog::warn("data: {}", w);
  return std::move(*data);
}

// num_threads 0: OMP_NUM_THREADS when set (Slurm's --cpus-per-task
// convention), else the node's cores shared by its ranks.
int default_threads(int ranks_on_node) {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, ranks_on_node));
}

Placement place_rank(const Config& config, const DistContext& dist) {
  Placement p;
  p.node = dist.node();
  std::string error;
  try {  // a node without a usable GPU fails on its ranks alone
    p.device = rank_device(config, p.node);
  } catch (const RunError& e) {
    error = std::string(e.what()) + " (rank " + std::to_string(dist.rank()) + " on " + p.node.hostname + ")";
  }
  fail_if_any(error, dist);
  // device: auto must choose alike everywhere (NCCL or MPI gradients).
  const double cuda_ranks = dist.size() > 1 ? dist.allreduce_sum(p.device.is_cuda() ? 1 : 0) : 0;
  if (cuda_ranks > 0 && cuda_ranks < dist.size()) {  // the same on every rank
    std::string mixed;
    if (!p.device.is_cuda())
      mixed = "configuration: device: " + config.device + " found no usable CUDA device on rank " +
              std::to_string(dist.rank()) + " (" + p.node.hostname + ") but " + std::to_string(int64_t(cuda_ranks)) +
              " rank(s) have one; the ranks must all train on the GPU or all on the CPU (device: cpu)";
    fail_if_any(mixed, dist);
  }
  p.node.device_memory_bytes =
      p.device.is_cuda() ? cuda_device_memory(p.device.index()) : memory_snapshot("cpu").capacity_bytes;
  p.threads = config.num_threads > 0 ? config.num_threads : default_threads(p.node.ranks_on_node);
  return p;
}

void log_plans_per_rank(const DistContext& dist, const Placement& place, const RecomputePlan& plan) {
  if (dist.size() == 1) return;
  char row[256];
  std::snprintf(row, sizeof row, "%-5d %-5d %-21s %-6d %-12s %s", dist.rank(), place.node.node_index,
                place.node.hostname.c_str(), place.node.local_rank, place.device.str().c_str(), plan.summary().c_str());
  const auto rows = dist.gather_strings(row);
  if (dist.rank() != 0) return;
  std::string table = "recomputation plans per rank:\nrank  node  host                  local  device       plan";
  for (const auto& r : rows) table += "\n" + r;
  spdlog::info("{}", table);
}

RankPlan plan_rank(const Config& config, const Placement& place, const DistContext& dist) {
  RankPlan plan;
  std::string error;
  try {  // per-node rules: may fail on some nodes only
    plan = plan_for_rank(config, place.node);
  } catch (const std::invalid_argument& e) {
    error = std::string("configuration: ") + e.what();
  }
  fail_if_any(error, dist);
  if (plan.automatic) return plan;  // logged once the planner has chosen
  spdlog::info("recomputation plan ({}{}):\n{}", plan.plan.summary(),
               plan.rules_applied.empty() ? "" : "; checkpoint_node_rules applied: " + plan.rules_text(),
               plan.plan.table());
  log_plans_per_rank(dist, place, plan.plan);
  return plan;
}

RunDir make_run_dir(const LoadedConfig& loaded, const RecomputePlan& plan, const DistContext& dist) {
  const Config& config = loaded.config;
  RunDir run;
  run.run_id = dist.broadcast_string(config.run_id.empty() ? new_run_id() : config.run_id);  // one run, one id
  run.path = fs::path(config.run_root) / run.run_id;
  run.num_mini_epochs = config.num_mini_epochs;
  // Upstream's loader finds the weights at {model_path}/{run_id}: here, run_root.
  auto json = nlohmann::json::parse(loaded.upstream_json);
  json["run_id"] = run.run_id;
  json["model_path"] = fs::absolute(config.run_root).lexically_normal().string();
  json["run_path"] = json["model_path"];
  json["data_loader_rng_seed"] = config.data_seed();
  run.upstream_json = json.dump();
  if (dist.rank() == 0) {
    fs::create_directories(run.path);
    write_text(run.path / "config.yml", loaded.resolved_yaml);
  }
  write_plan(run, plan, dist);
  return run;
}

void write_plan(const RunDir& run, const RecomputePlan& plan, const DistContext& dist) {
  if (dist.rank() == 0) write_text(run.path / "plan.txt", plan.table() + "\n");
}

Training build_trainer(const Config& config, Dataset data, const RankPlan& plan, const Placement& place,
                       const CliOptions& options, const DistContext& dist) {
  set_compute_threads(place.threads);
  if (!keep_freed_cpu_memory(int64_t(config.cpu_keep_freed_mib) << 20) && dist.rank() == 0)
    spdlog::warn("cpu_keep_freed_mib: this C library did not take malloc's thresholds; freed memory goes back "
                 "to the system after each step");
  Training t;
  if (dist.size() > 1)
    t.comm = place.device.is_cuda() ? make_nccl_communicator(dist, place.device.index()) : make_mpi_communicator(dist);
  try {
    t.trainer = std::make_unique<Trainer>(config, std::move(data), plan.plan, place.device, &dist, t.comm.get());
  } catch (const std::invalid_argument& e) {  // the same on every rank: a world size the config cannot use
    throw RunError(2, std::string("configuration: ") + e.what());
  }
  const bool bf16 = place.device.is_cuda() && config.with_mixed_precision;
  const PeakFlops peak = peak_flops(config.peak_tflops, place.device.str(),
                                    place.device.is_cuda() ? cuda_device_name(place.device.index()) : "", bf16);
  t.trainer->set_peak_flops(peak.flops);
  if (dist.rank() == 0) {
    if (!t.trainer->schedule().cooldown_warning().empty()) spdlog::warn("{}", t.trainer->schedule().cooldown_warning());
    const bool tera = peak.flops >= 1e12;
    spdlog::info("MFU against {:.1f} {}FLOP/s per rank ({})", peak.flops * (tera ? 1e-12 : 1e-9), tera ? "T" : "G",
                 peak.source);
  }
  if (options.init_weights.empty()) return t;
  std::string error;
  try {
    const std::string file = weights_file_in(options.init_weights);  // a file, or a model directory's newest
    const int n = load_weights(*t.trainer->model(), file, parse_weights_mapping(options.init_weights_prefix));
    if (dist.rank() == 0) {
      spdlog::info("initialised {} tensors from {}{}", n, file,
                   options.init_weights_prefix.empty() ? "" : " (prefix " + options.init_weights_prefix + ")");
      if (const std::string saved = saved_config_of(file); !saved.empty())
        spdlog::info("the configuration it was trained with: {} (this run's comes from --config and --set)", saved);
    }
  } catch (const std::runtime_error& e) {  // Safetensors/Chkpt/WeightsMismatchError, or a rank's read failing
    error = std::string("--init-weights: ") + e.what();
  }
  fail_if_any(error, dist);
  return t;
}

int dump_step(const CliOptions& options, const Config& config, Trainer& trainer, const DistContext& dist) {
  if (dist.rank() != 0) return 0;
  const std::string& path = options.dump_step;
  try {
    const double loss = write_step_dump(path, trainer, config, trainer.batch(0), 0, options.dump_step_dtype == "f64");
    spdlog::info("step 0 written to {} (loss {:.6g}); check it with tests/reference/wg_twin.py check {}", path, loss,
                 path);
  } catch (const std::exception& e) {
    throw RunError(1, std::string("--dump-step: ") + e.what(), RunError::Scope::EveryRankOwn);
  }
  return 0;
}

PlanPrediction plan_automatically(Trainer& trainer, const Config& config, const RankPlan& plan,
                                  const Placement& place, const DistContext& dist) {
  if (!plan.automatic) return {};
  std::string failure;
  AutoPlan a;
  try {
    const int64_t budget = auto_budget_bytes(config.auto_plan, memory_snapshot(place.device.str()).available_bytes);
    a = apply_auto_plan(trainer, budget, plan, config.auto_plan.oom_max_retries);
  } catch (const std::invalid_argument& e) {
    failure = e.what();
  }
  if (dist.size() > 1 && dist.allreduce_max(failure.empty() ? 0.0 : 1.0) > 0 && failure.empty())
    failure = "another rank could not plan";
  if (!failure.empty())
    throw RunError(2, "gradient_checkpointing.policy auto on rank " + std::to_string(dist.rank()) + ": " + failure,
                   RunError::Scope::EveryRankOwn);
  spdlog::info("measured piece costs:\n{}", cost_table(a.costs));
  const std::string checked =
      a.checked_peak_bytes < 0 ? std::string("out of memory") : format_bytes(a.checked_peak_bytes);
  spdlog::info(
      "auto plan for a budget of {} ({}): predicted step peak {}, {} measured on the {} batch(es) it was planned "
      "from{}, predicted added time (lean and recomputed pieces) {:.1f} ms/step{}:\n{}",
      format_bytes(a.budget_bytes), a.plan.summary(), format_bytes(a.predicted_peak_bytes), checked,
      trainer.planning_batch_count(),
      a.replans == 0 ? std::string()
                     : " (planned " + std::to_string(a.replans + 1) + " times: earlier plans measured over the budget)",
      a.added_seconds * 1e3,
      plan.rules_applied.empty() ? "" : "; per-node rules " + plan.rules_text() + " keep their sections",
      a.plan.table());
  if (a.checked_over_budget())
    spdlog::warn(
        "auto plan: {} on the batches it was planned from, over the budget of {}, the lowest of {} plans "
        "checked; training goes on with it (a device's out-of-memory fallback recomputes more where it runs "
        "out)",
        checked, format_bytes(a.budget_bytes), a.replans + 1);
  log_plans_per_rank(dist, place, a.plan);
  return {a.predicted_peak_bytes, a.added_seconds};
}

std::vector<MetricsSink*> Sinks::all() const {
  std::vector<MetricsSink*> out{coordinator.get()};
  for (const auto& f : files) out.push_back(f.get());
  return out;
}

Sinks attach_sinks(const Config& config, const CliOptions& options, const RunDir& run, const Placement& place,
                   const PlanPrediction& prediction, Trainer& trainer, const DistContext& dist) {
  if (config.auto_plan.cpu_memory_limit_gib > 0)
    set_cpu_memory_limit(int64_t(config.auto_plan.cpu_memory_limit_gib * kGiB));
  const bool lead = dist.rank() == 0;
  if (lead)
    spdlog::info(
        "run {} in {}: {} rank(s) on {} node(s), {}, device {}, {} threads per rank (BLAS: {}, {} thread(s); "
        "float32 products: {}), {} parameters, {} steps",
        run.run_id, run.path.string(), dist.size(), dist.num_nodes(),
        dist.size() > 1 ? (place.device.is_cuda() ? "nccl" : "mpi") : "no communication", place.device.str(),
        place.threads, blas_kind(), blas_threads(), sgemm_provider(), trainer.parameter_count(), trainer.total_steps());
  Sinks s;
  if (lead && config.telemetry.enabled) {  // every rank reports its windows; rank 0 serves them
    RunIdentity id;
    id.run_id = run.run_id;
    if (const char* job = std::getenv("SLURM_JOB_ID")) id.slurm_job_id = job;
    for (const auto& f : options.sources.files)
      id.config += (id.config.empty() ? "" : ",") + fs::path(f).filename().string();
    id.version = WG_VERSION;
    id.ranks = dist.size();
    s.telemetry = std::make_unique<JobTelemetry>(config.telemetry, id, trainer.plan().pieces(), trainer.loss_names().streams);
    s.telemetry->start();
  }
  JobTelemetry* telemetry = s.telemetry.get();
  s.coordinator = std::make_unique<Coordinator>(
      dist, place.device.str(), memory_snapshot(place.device.str()).capacity_bytes, config.train_log_freq.metrics,
      [&trainer]() -> const RecomputePlan& { return trainer.plan(); },
      [telemetry](const std::vector<RankWindow>& w) {
        if (telemetry) telemetry->on_windows(w);
      });
  s.coordinator->set_planned_peak(prediction.peak_bytes);
  if (lead) {
    s.files.push_back(std::make_unique<LogSink>(config.train_log_freq.terminal, prediction));
    s.files.push_back(std::make_unique<JsonlSink>(run.path.string(), config.train_log_freq.metrics, prediction,
                                                           trainer.loss_names()));
  }
  return s;
}

Trainer::Control resume_and_control(const Config& config, const RunDir& run, Trainer& trainer, Sinks& sinks,
                                    const DistContext& dist, Clock::time_point started) {
  Trainer::Control control;
  bool resumed = false;
  try {
    if (auto next = resume_latest(run.path.string(), trainer, dist)) {
      control.first_step = *next;
      resumed = true;
    }
  } catch (const std::runtime_error& e) {  // every rank together (resume_latest agrees)
    throw RunError(2, std::string("resume: ") + e.what());
  }
  if (resumed && dist.rank() == 0) {  // rank 0 alone: a failure only costs the counter
    try {
      const int64_t resumes = count_resume(run.path);
      if (sinks.telemetry) sinks.telemetry->on_resume(resumes);
    } catch (const std::runtime_error& e) {
      spdlog::warn("the run's resume count (wgtrain_restarts_total) is not kept: {}", e.what());
    }
  }
  const double limit_s = config.time_limit_minutes * 60.0 - config.stop_margin_seconds;
  const bool limited = config.time_limit_minutes > 0;
  control.stop = [&dist, started, limit_s, limited] {  // one small allreduce: every rank stops at the same step
    const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
    const bool local = stop_requested() || (limited && elapsed >= limit_s);
    return dist.allreduce_max(local ? 1.0 : 0.0) > 0;
  };
  control.checkpoint_every = config.train_log_freq.checkpoint;
  const int keep = config.checkpoint_keep;
  control.checkpoint = [run, &trainer, &dist, keep](int64_t next) {
    save_checkpoint(run.path.string(), trainer, next, dist, keep);
    if (dist.rank() == 0) write_upstream_weights(run, upstream_tag(-1), trainer);  // as upstream: _latest
  };
  return control;
}

RunSummary train(Trainer& trainer, Sinks& sinks, const Trainer::Control& control) {
  try {
    return trainer.train(sinks.all(), control);
  } catch (const NonFiniteLossError& e) {  // all ranks agreed on it
    throw RunError(3, e.what());
  }
}

void report_failure(const RunDir& run, Trainer& trainer, Sinks& sinks) {
  if (!sinks.telemetry) return;
  try {
    // A resume that failed left the trainer at step 0; the run still
    // continues at its newest checkpoint (wgtrain_job_last_step's meaning).
    const int64_t continues_at = std::max(trainer.next_step(), newest_checkpoint_step(run.path.string()).value_or(0));
    sinks.telemetry->finish("failed", continues_at);
  } catch (const std::exception& e) {  // the run's own error is the one to report
    spdlog::warn("telemetry: the failed outcome was not reported: {}", e.what());
  }
}

namespace {

// Runs `save` with the weights upstream saves in the model: the weight
// average when the run keeps one (validate_with_ema), else the weights.
void with_saved_weights(Trainer& trainer, const std::function<void()>& save) {
  WeightAverage* ema = trainer.weight_average();
  if (!ema) return save();
  const auto params = trainer.model()->parameters();
  ema->swap_with(params);
  try {
    save();
  } catch (...) {
    ema->swap_with(params);
    throw;
  }
  ema->swap_with(params);
}

}  // namespace

void write_upstream_weights(const RunDir& run, const std::string& tag, Trainer& trainer) {
  with_saved_weights(trainer, [&] { write_upstream_model(run.path, run.run_id, tag, *trainer.model(), run.upstream_json); });
}

void finish(const RunDir& run, const RunSummary& summary, Trainer& trainer, Sinks& sinks, const DistContext& dist) {
  if (dist.rank() == 0) {
    const auto path = (run.path / "weights.safetensors").string();
    with_saved_weights(trainer, [&] { save_weights(*trainer.model(), path); });
    // {run_id}_latest.chkpt holds these weights already: the trainer's last
    // step wrote its training checkpoint, and with it _latest.
    if (!summary.stopped_early) write_upstream_weights(run, upstream_tag(run.num_mini_epochs), trainer);
    spdlog::info("weights written to {}, and as WeatherGenerator's {}_{}.chkpt beside it{}", path, run.run_id,
                 summary.stopped_early ? upstream_tag(-1) : upstream_tag(run.num_mini_epochs),
                 trainer.weight_average() ? " (the weight average, validate_with_ema, as upstream saves them)" : "");
    if (summary.stopped_early)
      spdlog::info("stopped at step {} ({}); the checkpoint is saved: run again with run_id {} to continue",
                   summary.next_step, stop_requested() ? "signal " + std::to_string(stop_signal()) : "time limit",
                   run.run_id);
  }
  if (!sinks.telemetry) return;
  sinks.telemetry->finish(summary.stopped_early ? "stopped" : "completed", summary.next_step);
  write_text(run.path / "metrics.prom", sinks.telemetry->exposition());  // the final state, the push's outcome included
}

}  // namespace wg::run
