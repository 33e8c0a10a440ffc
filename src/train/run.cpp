// The program's flow (see header).
#include "wg/train/run.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "wg/data/anemoi.h"
#include "wg/dist/communicator.h"
#include "wg/dist/devices.h"
#include "wg/dist/node_rules.h"
#include "wg/io/weights.h"
#include "wg/telemetry/coordinator.h"
#include "wg/telemetry/job_telemetry.h"
#include "wg/train/auto_plan.h"
#include "wg/train/stop_request.h"
#include "wg/train/train_checkpoint.h"
#include "wg/train/cost_profiler.h"
#include "wg/model/checkpoint_plan.h"
#include "wg/train/trainer.h"
#include "wg/util/logging.h"
#include "wg/util/memory.h"
#include "wg/util/threads.h"

namespace wg {

namespace fs = std::filesystem;

std::string usage() {
  return "usage: wgtrain [--config FILE]... [--set KEY=VALUE]... [--log-level LEVEL] [--print-plan]\n"
         "  --config FILE     overlay a YAML file on config/default_config.yml (repeatable, in order)\n"
         "  --set KEY=VALUE   override one key, dotted for nested keys (repeatable, applied last)\n"
         "  --data-path DIR   root of relative anemoi filenames (beats data_path and $WG_DATA_PATH)\n"
         "  --log-level L     trace|debug|info|warn|error (default info)\n"
         "  --print-plan      print the resolved checkpoint plan and exit\n"
         "  --init-weights FILE          initialise the model from a safetensors file\n"
         "  --init-weights-prefix P[=Q]  only tensors named P...; they load into parameters Q... (default Q = P),\n"
         "                               e.g. embed_engine.embeds.ERA5. to take one stream's embed transformer\n"
         "  --version, --help\n";
}

CliOptions parse_cli(const std::vector<std::string>& args) {
  CliOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const std::string& name) -> std::string {
      if (i + 1 >= args.size()) throw std::invalid_argument("option " + name + " needs a value");
      return args[++i];
    };
    auto split = [&](const std::string& name, std::string& out) {  // --name=value form
      if (a.rfind(name + "=", 0) != 0) return false;
      out = a.substr(name.size() + 1);
      return true;
    };
    std::string v;
    if (a == "--config") o.sources.files.push_back(value(a));
    else if (split("--config", v)) o.sources.files.push_back(v);
    else if (a == "--set") o.sources.overrides.push_back(value(a));
    else if (split("--set", v)) o.sources.overrides.push_back(v);
    else if (a == "--data-path") o.sources.overrides.push_back("data_path=" + value(a));
    else if (split("--data-path", v)) o.sources.overrides.push_back("data_path=" + v);
    else if (a == "--log-level") o.log_level = value(a);
    else if (split("--log-level", v)) o.log_level = v;
    else if (a == "--print-plan") o.print_plan = true;
    else if (a == "--init-weights") o.init_weights = value(a);
    else if (split("--init-weights", v)) o.init_weights = v;
    else if (a == "--init-weights-prefix") o.init_weights_prefix = value(a);
    else if (split("--init-weights-prefix", v)) o.init_weights_prefix = v;
    else if (a == "--help" || a == "-h") o.help = true;
    else if (a == "--version") o.version = true;
    else throw std::invalid_argument("unknown option '" + a + "'");
  }
  if (!o.init_weights_prefix.empty() && o.init_weights.empty())
    throw std::invalid_argument("--init-weights-prefix needs --init-weights FILE");
  static const char* levels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  if (std::find(std::begin(levels), std::end(levels), o.log_level) == std::end(levels))
    throw std::invalid_argument("--log-level '" + o.log_level + "' is not one of trace|debug|info|warn|error");
  return o;
}

namespace {

std::string new_run_id() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%04x", unsigned(std::random_device{}() & 0xffff));
  return std::string(stamp) + "-" + suffix;
}

torch::Device choose_device(const std::string& wanted) {
  if (wanted == "cpu") return torch::kCPU;
  const bool cuda = torch::cuda::is_available();
  if (wanted == "cuda" && !cuda) throw std::invalid_argument("device: cuda requested but no CUDA device is usable");
  return cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace

namespace {

// Rank 0 logs one line per rank: where it runs and which plan it uses.
void log_plans_per_node(const DistContext& dist, const std::string& line) {
  const auto lines = dist.gather_strings(line);
  if (dist.rank() != 0) return;
  std::string table = "checkpoint plans per rank:\nrank  node  host                  local  device       plan";
  for (const auto& l : lines) table += "\n" + l;
  spdlog::info("{}", table);
}

std::string plan_row(const DistContext& dist, const std::string& device, const std::string& summary) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-5d %-5d %-21s %-6d %-12s %s", dist.rank(), dist.node().node_index,
                dist.node().hostname.c_str(), dist.node().local_rank, device.c_str(), summary.c_str());
  return buf;
}

torch::Device rank_device(const Config& config, const NodeInfo& node) {
  const torch::Device wanted = choose_device(config.device);
  if (!wanted.is_cuda()) return wanted;
  return torch::Device(torch::kCUDA, device_for_local_rank(node.local_rank, cuda_device_count()));
}

// Opens every stream's data on every rank (anemoi channels come from the
// stores) and lets the ranks agree on the outcome: a store may be missing or
// different on one node only, and no rank may wait for one that gave up.
// Every rank must see the same training windows, or shards overlap.
// Returns false, having logged why, when the run cannot start.
bool open_data(Config& config, const DistContext& dist) {
  const bool lead = dist.rank() == 0;
  std::string error;
  int64_t windows = 0;
  try {
    resolve_anemoi_streams(config);
    const Dataset data(config, dist.rank(), dist.size());
    windows = data.windows();
    if (lead && !data.summary().empty()) spdlog::info("{}", data.summary());
    if (lead)
      for (const auto& w : data.warnings()) spdlog::warn("data: {}", w);
  } catch (const DataError& e) {
    error = std::string("data: ") + e.what();
  } catch (const std::invalid_argument& e) {  // a world size the configuration cannot use
    error = std::string("configuration: ") + e.what();
  }
  const bool failed = !error.empty();
  if (dist.size() == 1) {
    if (failed) spdlog::error("{}", error);
    return !failed;
  }
  const bool any_failed = dist.allreduce_max(failed ? 1 : 0) > 0;
  const bool lead_failed = dist.allreduce_max(lead && failed ? 1 : 0) > 0;
  if (failed && (lead || !lead_failed)) spdlog::error("{}", error);  // rank 0 speaks for identical errors
  if (any_failed) return false;
  const double most = dist.allreduce_max(double(windows)), fewest = -dist.allreduce_max(-double(windows));
  if (most != fewest) {
    if (lead)
      spdlog::error("data: the ranks see {} to {} training windows: their copies of the stores differ "
                    "(check data_path / WG_DATA_PATH on every node)",
                    int64_t(fewest), int64_t(most));
    return false;
  }
  return true;
}

}  // namespace

int run_training(const CliOptions& options, const DistContext& dist) {
  const bool multi = dist.size() > 1;
  const bool lead = dist.rank() == 0;
  setup_logging(options.log_level, multi ? dist.rank() : -1);
  install_stop_handlers();  // USR1 / TERM: stop at the next step, save, exit 0
  const auto started = std::chrono::steady_clock::now();
  install_counting_allocator();  // before any tensor exists

  // Every rank loads and checks the same files; rank 0 reports the problems.
  Config config;
  try {
    config = load_config(options.sources);
  } catch (const ConfigError& e) {
    if (lead) {
      spdlog::error("configuration has {} problem(s):", e.problems().size());
      for (const auto& p : e.problems()) spdlog::error("  {}", p);
    }
    return 2;
  }

  if (!open_data(config, dist)) return 2;

  NodeInfo node = dist.node();
  const torch::Device device = rank_device(config, node);
  node.device_memory_bytes = device.is_cuda() ? cuda_device_memory(device.index()) : memory_snapshot("cpu").capacity_bytes;
  CheckpointPlan plan;
  std::vector<int> applied;
  try {
    config.gradient_checkpointing = apply_node_rules(config, node, &applied);
    plan = resolve_checkpoint_plan(config);
  } catch (const std::invalid_argument& e) {
    spdlog::error("configuration: {}", e.what());
    return 2;
  }
  std::string rules;
  std::set<std::string> rule_sections;  // sections a matching rule sets: the auto planner leaves them
  for (int i : applied) {
    rules += (rules.empty() ? "" : ", ") + std::to_string(i);
    const CheckpointConfig& set = config.checkpoint_node_rules[size_t(i)].set;
    if (set.embed.set) rule_sections.insert("embed");
    if (set.latent.set) rule_sections.insert("latent");
    if (set.pred.set) rule_sections.insert("pred");
  }
  if (!config.auto_plan.enabled) {
    spdlog::info("checkpoint plan ({}{}):\n{}", plan.summary(),
                 applied.empty() ? "" : "; checkpoint_node_rules applied: " + rules, plan.table());
    if (multi) log_plans_per_node(dist, plan_row(dist, device.str(), plan.summary()));
    if (options.print_plan) return 0;
  }

  const int threads = config.num_threads > 0 ? config.num_threads
                                             : std::max(1, int(std::thread::hardware_concurrency()) / node.ranks_on_node);
  set_compute_threads(threads);

  if (config.run_id.empty()) config.run_id = new_run_id();
  config.run_id = dist.broadcast_string(config.run_id);  // one run, one id
  const fs::path run_dir = fs::path(config.run_root) / config.run_id;
  if (lead) {
    fs::create_directories(run_dir);
    write_text(run_dir / "config.yml", resolved_config_yaml(options.sources));
    write_text(run_dir / "plan.txt", plan.table() + "\n");
  }

  std::unique_ptr<Communicator> comm;  // declared before the trainer: its GradSync uses it
  if (multi) comm = device.is_cuda() ? make_nccl_communicator(dist, device.index()) : make_mpi_communicator(dist);
  std::unique_ptr<Trainer> trainer;
  try {
    trainer = std::make_unique<Trainer>(config, plan, device, &dist, comm.get());
  } catch (const std::invalid_argument& e) {  // the same on every rank: a world size the config cannot use
    if (lead) spdlog::error("configuration: {}", e.what());
    return 2;
  } catch (const DataError& e) {  // open_data passed, so only if the stores changed since: every rank reopened them
    if (lead) spdlog::error("data: {}", e.what());
    return 2;
  }
  if (!options.init_weights.empty()) {
    try {
      const int n = load_weights(*trainer->model(), options.init_weights, parse_weights_mapping(options.init_weights_prefix));
      if (lead)
        spdlog::info("initialised {} tensors from {}{}", n, options.init_weights,
                     options.init_weights_prefix.empty() ? "" : " (prefix " + options.init_weights_prefix + ")");
    } catch (const std::runtime_error& e) {  // SafetensorsError, WeightsMismatchError
      if (lead) spdlog::error("--init-weights: {}", e.what());
      return 2;
    }
  }
  int64_t planned_peak = 0;  // exported as wgtrain_planned_peak_bytes
  if (config.auto_plan.enabled) {
    std::string failure;
    try {
      const int64_t budget = auto_budget_bytes(config.auto_plan, device.str());
      const AutoPlan a = choose_auto_plan(*trainer, trainer->planning_batch(), budget, plan, rule_sections);
      spdlog::info("measured piece costs:\n{}", cost_table(a.costs));
      spdlog::info("auto plan for a budget of {} ({}): predicted step peak {}, predicted recompute {:.1f} ms/step{}:\n{}",
                   format_bytes(a.budget_bytes), a.plan.summary(), format_bytes(a.predicted_peak_bytes),
                   a.added_seconds * 1e3, rules.empty() ? "" : "; per-node rules " + rules + " keep their sections",
                   a.plan.table());
      plan = a.plan;
      planned_peak = a.predicted_peak_bytes;
    } catch (const std::invalid_argument& e) {
      failure = e.what();
    }
    if (multi && trainer->world() > 1) {  // every rank stops if one cannot plan
      const bool any = dist.allreduce_max(failure.empty() ? 0.0 : 1.0) > 0;
      if (any && failure.empty()) failure = "another rank could not plan";
    }
    if (!failure.empty()) {
      spdlog::error("gradient_checkpointing.policy auto on rank {}: {}", dist.rank(), failure);
      return 2;
    }
    if (multi) log_plans_per_node(dist, plan_row(dist, device.str(), plan.summary()));
    if (options.print_plan) return 0;
    if (lead) write_text(run_dir / "plan.txt", plan.table() + "\n");
  }
  if (config.auto_plan.cpu_memory_limit_gib > 0)
    set_cpu_memory_limit(int64_t(config.auto_plan.cpu_memory_limit_gib * double(1ll << 30)));
  if (lead)
    spdlog::info("run {} in {}: {} rank(s) on {} node(s), {}, device {}, {} threads per rank, {} parameters, {} steps",
                 config.run_id, run_dir.string(), dist.size(), dist.num_nodes(), comm ? comm->name() : "no communication",
                 device.str(), threads,
                 [&] { int64_t n = 0; for (auto& p : trainer->model()->parameters()) n += p.numel(); return n; }(),
                 trainer->total_steps());
  // Telemetry: every rank reports its windows; rank 0 serves them.
  std::unique_ptr<JobTelemetry> telemetry;
  if (lead && config.telemetry.enabled) {
    RunIdentity id;
    id.run_id = config.run_id;
    if (const char* job = std::getenv("SLURM_JOB_ID")) id.slurm_job_id = job;
    for (const auto& f : options.sources.files) id.config += (id.config.empty() ? "" : ",") + fs::path(f).filename().string();
    id.version = WG_VERSION;
    id.ranks = dist.size();
    telemetry = std::make_unique<JobTelemetry>(config.telemetry, id, trainer->plan().keys());
    telemetry->start();
  }
  Coordinator coordinator(
      dist, device.str(), memory_snapshot(device.str()).capacity_bytes, config.train_log_freq.metrics,
      [&]() -> const CheckpointPlan& { return trainer->plan(); },
      [&](const std::vector<RankWindow>& w) { if (telemetry) telemetry->on_windows(w); });
  coordinator.set_planned_peak(planned_peak);
  std::vector<std::unique_ptr<MetricsSink>> sinks;
  if (lead) {
    sinks.push_back(std::make_unique<LogSink>(config.train_log_freq.terminal));
    sinks.push_back(std::make_unique<JsonlSink>(run_dir.string(), config.train_log_freq.metrics));
  }
  std::vector<MetricsSink*> sink_ptrs{&coordinator};
  for (auto& s : sinks) sink_ptrs.push_back(s.get());
  Trainer::Control control;
  try {
    if (auto next = resume_latest(run_dir.string(), *trainer, dist)) {
      control.first_step = *next;
      if (telemetry) telemetry->registry().counter("wgtrain_restarts_total", "Times this run was resumed from a checkpoint.").with().inc();
    }
  } catch (const std::runtime_error& e) {
    if (lead) spdlog::error("resume: {}", e.what());
    return 2;
  }
  const double limit_s = config.time_limit_minutes * 60.0 - config.stop_margin_seconds;
  control.stop = [&] {  // one small allreduce: every rank stops at the same step
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const bool local = stop_requested() || (config.time_limit_minutes > 0 && elapsed >= limit_s);
    return dist.allreduce_max(local ? 1.0 : 0.0) > 0;
  };
  control.checkpoint_every = config.train_log_freq.checkpoint;
  control.checkpoint = [&](int64_t next) { save_checkpoint(run_dir.string(), *trainer, next, dist, config.checkpoint_keep); };
  RunSummary summary;
  try {
    summary = trainer->train(sink_ptrs, control);
  } catch (const NonFiniteLossError& e) {  // all ranks agreed on it
    if (lead) spdlog::error("{}", e.what());
    if (telemetry) telemetry->finish("failed", 0);
    return 3;
  }
  if (lead) {
    save_weights(*trainer->model(), (run_dir / "weights.safetensors").string());
    spdlog::info("weights written to {}", (run_dir / "weights.safetensors").string());
  }
  if (summary.stopped_early && lead)
    spdlog::info("stopped at step {} ({}); the checkpoint is saved: run again with run_id {} to continue",
                 summary.next_step, stop_requested() ? "signal " + std::to_string(stop_signal()) : "time limit",
                 config.run_id);
  if (telemetry) {
    telemetry->finish(summary.stopped_early ? "stopped" : "completed", summary.next_step);
    write_text(run_dir / "metrics.prom", telemetry->exposition());  // the final state, the push's outcome included
  }
  return 0;
}

}  // namespace wg
