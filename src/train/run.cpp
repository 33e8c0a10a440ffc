// The program's flow (see header).
#include "wg/train/run.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>

#include "wg/io/weights.h"
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

int run_training(const CliOptions& options) {
  setup_logging(options.log_level);
  install_counting_allocator();  // before any tensor exists

  Config config;
  CheckpointPlan plan;
  try {
    config = load_config(options.sources);
    plan = resolve_checkpoint_plan(config);
  } catch (const ConfigError& e) {
    spdlog::error("configuration has {} problem(s):", e.problems().size());
    for (const auto& p : e.problems()) spdlog::error("  {}", p);
    return 2;
  } catch (const std::invalid_argument& e) {
    spdlog::error("configuration: {}", e.what());
    return 2;
  }
  spdlog::info("checkpoint plan ({}):\n{}", plan.summary(), plan.table());
  if (options.print_plan) return 0;

  const torch::Device device = choose_device(config.device);
  const int threads = config.num_threads > 0 ? config.num_threads
                                             : std::max(1, int(std::thread::hardware_concurrency()));
  set_compute_threads(threads);

  if (config.run_id.empty()) config.run_id = new_run_id();
  const fs::path run_dir = fs::path(config.run_root) / config.run_id;
  fs::create_directories(run_dir);
  write_text(run_dir / "config.yml", resolved_config_yaml(options.sources));
  write_text(run_dir / "plan.txt", plan.table() + "\n");

  Trainer trainer(config, plan, device);
  if (!options.init_weights.empty()) {
    try {
      const int n = load_weights(*trainer.model(), options.init_weights, parse_weights_mapping(options.init_weights_prefix));
      spdlog::info("initialised {} tensors from {}{}", n, options.init_weights,
                   options.init_weights_prefix.empty() ? "" : " (prefix " + options.init_weights_prefix + ")");
    } catch (const std::runtime_error& e) {  // SafetensorsError, WeightsMismatchError
      spdlog::error("--init-weights: {}", e.what());
      return 2;
    }
  }
  spdlog::info("run {} in {}: device {}, {} threads, {} parameters, {} steps", config.run_id, run_dir.string(),
               device.str(), threads,
               [&] { int64_t n = 0; for (auto& p : trainer.model()->parameters()) n += p.numel(); return n; }(),
               trainer.total_steps());
  LogSink log_sink(config.train_log_freq.terminal);
  JsonlSink jsonl_sink(run_dir.string(), config.train_log_freq.metrics);
  try {
    trainer.train({&log_sink, &jsonl_sink});
  } catch (const NonFiniteLossError& e) {
    spdlog::error("{}", e.what());
    return 3;
  }
  save_weights(*trainer.model(), (run_dir / "weights.safetensors").string());
  spdlog::info("weights written to {}", (run_dir / "weights.safetensors").string());
  return 0;
}

}  // namespace wg
