// Benchmark: this trainer against its PyTorch twin (tests/reference/twin.py,
// eager), per checkpoint mode, on the same model, config, batches, initial
// weights, optimizer (AdamW + clipping), thread count and BLAS threads.
//
// Set-up: loads the config, sets the compute threads (intra-op pool = n,
// BLAS = 1; the twin gets torch.set_num_threads(n) and OPENBLAS_NUM_THREADS=1),
// dumps K batches of the dataset into a safetensors file in the twin's
// `bench` format, writes the initial weights (C++ model, config seed) and the
// resolved config. Then R rounds, alternating: C++ all modes (each a fresh
// Trainer loaded with the initial weights, W warm-up then N timed steps of
// step_on(batch k % K), only the step timed), then the twin `bench` for all
// modes (it times internally; its JSON is read back). Per mode and
// implementation: median step time over all rounds, steps/s, step peak
// memory, and the C++/PyTorch steps/s ratio. Writes a table, a JSON file in
// the format bench/plot_vs_pytorch.py reads, and the plot.
//
//   bench_vs_pytorch [--config F]... [--set K=V]... [--threads 2] [--rounds 3] [--warmup 2]
//                    [--steps 10] [--batches 8] [--out bench/results/vs_pytorch.json] [--no-plot]
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "wg/config/loader.h"
#include "wg/data/dataset.h"
#include "wg/io/safetensors.h"
#include "wg/io/weights.h"
#include "wg/plan/recompute_plan.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/loss.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"
#include "wg/util/threads.h"
#include "wg/util/units.h"

using namespace wg;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const char* kCppMemoryMethod =
    "counting CPU allocator (install_counting_allocator, every CPU tensor allocation through c10's allocator; "
    "not oneDNN/BLAS scratch mallocs): StepMetrics peak_bytes minus start_bytes, the bytes held when the step's "
    "compute began (its input tensors made, as the twin's are before its step); max over 2 extra untimed steps after the timed ones (the same batches the "
    "twin profiles), over all rounds (cpp_step_peak_bytes_max_timed_steps: max over every timed step)";

struct Mode {
  const char* name;       // as reported
  const char* twin_name;  // the twin's --modes name
  RecomputeMode mode;
  int every_n;
};

const Mode kModes[] = {{"none", "none", RecomputeMode::None, 1},
                       {"selective", "selective", RecomputeMode::Selective, 1},
                       {"every_n=2", "every_n", RecomputeMode::EveryN, 2},
                       {"full", "full", RecomputeMode::Full, 1}};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}


std::string quote(const std::string& s) { return "'" + s + "'"; }

// The 1, 5 and 15 minute load averages (the machine may be shared).
std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The C++ trainer against its PyTorch twin, per recomputation mode, side by side", "bench_vs_pytorch"};
  ConfigSources sources;
  bench::add_config_options(app, sources);
  int threads = 2, rounds = 3, warmup = 2, steps = 10, num_batches = 8;
  bool no_plot = false, breakdown = false;
  std::string out = "bench/results/vs_pytorch.json";
  app.add_option("--threads", threads, "intra-op threads of both sides")->capture_default_str();
  app.add_option("--rounds", rounds, "alternating rounds")->capture_default_str();
  app.add_option("--warmup", warmup, "warm-up steps per round")->capture_default_str();
  app.add_option("--steps", steps, "measured steps per round")->capture_default_str();
  app.add_option("--batches", num_batches, "distinct batches cycled through")->capture_default_str();
  app.add_option("--out", out, "JSON results")->capture_default_str();
  app.add_flag("--no-plot", no_plot, "skip the plot");
  app.add_flag("--breakdown", breakdown, "time forward, backward and optimizer separately");
  bench::parse_or_exit(app, argc, argv);
  bench::default_config(sources);
  const bool plot = !no_plot;
  // Same thread environment as the twin's process: OpenMP reads it when it
  // loads, so the benchmark re-executes itself once with it set.
  const std::string omp = std::to_string(std::max(1, threads));
  const char* have_omp = std::getenv("OMP_NUM_THREADS");
  const char* have_blas = std::getenv("OPENBLAS_NUM_THREADS");
  if (!(have_omp && omp == have_omp && have_blas && std::string(have_blas) == "1")) {
    ::setenv("OMP_NUM_THREADS", omp.c_str(), 1);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    ::execv("/proc/self/exe", argv);
    std::perror("bench_vs_pytorch: re-exec with OMP_NUM_THREADS set failed; continuing");
  }
  if (steps < 1 || rounds < 1 || num_batches < 1 || warmup < 0 || threads < 1) {
    std::cerr << "--steps, --rounds and --batches must be >= 1, --warmup >= 0\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  install_counting_allocator();
  Config base;
  std::string resolved;
  try {
    base = load_config(sources);
    resolved = resolved_config_yaml(sources);
  } catch (const ConfigError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  set_compute_threads(threads);

  // ---- shared inputs: resolved config, batches, initial weights
  const fs::path out_path(out);
  const fs::path work = (out_path.parent_path().empty() ? fs::path(".") : out_path.parent_path()) /
                        (out_path.stem().string() + "_work");
  fs::create_directories(work);
  const std::string cfg_path = (work / "config.yml").string(), batches_path = (work / "batches.safetensors").string(),
                    weights_path = (work / "initial_weights.safetensors").string();
  std::ofstream(cfg_path) << resolved;

  Dataset data(base, 0, 1);
  std::vector<Batch> batches;
  SafetensorsFile bf;
  std::string names;
  for (int k = 0; k < num_batches; ++k) {
    batches.push_back(data.batch(k % data.total_steps()));
    const ModelInput in = to_model_input(batches.back(), torch::kCPU);
    const std::string p = "batch" + std::to_string(k) + ".";
    for (const StreamInput& s : in.streams) {
      if (k == 0) names += (names.empty() ? "" : ",") + s.stream;
      bf.tensors.push_back(to_record(p + s.stream + ".values", s.values, DType::F32));
      bf.tensors.push_back(to_record(p + s.stream + ".centroids", s.centroids, DType::F32));
      bf.tensors.push_back(to_record(p + s.stream + ".visible", s.visible, DType::I64));
      bf.tensors.push_back(to_record(p + s.stream + ".masked", s.masked, DType::I64));
    }
  }
  bf.metadata["streams"] = names;
  bf.metadata["batch_size"] = std::to_string(base.batch_size_per_gpu);
  bf.metadata["num_batches"] = std::to_string(num_batches);
  write_safetensors(batches_path, bf);
  {
    const auto shapes = Dataset(base, 0, 1).stream_shapes();
    torch::manual_seed(base.seed);
    WeatherModel init(base, shapes);
    save_weights(*init, weights_path);
  }

  std::string twin_modes;
  for (const Mode& m : kModes) twin_modes += (twin_modes.empty() ? "" : ",") + std::string(m.twin_name);

  const size_t nm = std::size(kModes);
  std::vector<std::vector<double>> cpp_sec(nm), torch_sec(nm);
  std::vector<int64_t> cpp_peak(nm, 0), cpp_peak_timed(nm, 0), torch_peak(nm, 0);
  std::vector<int> pieces_recomputed(nm), pieces_total(nm);
  std::vector<std::vector<double>> cpp_losses(nm), torch_losses(nm);
  std::string torch_version, torch_memory_method;

  const std::string load_start = loadavg();
  std::printf("vs_pytorch: load average %s\n", load_start.c_str());
  std::printf("vs_pytorch: config %s, %d thread(s), batch %d, %d batches, %d round(s) x (%d warm-up + %d timed)\n",
              sources.files.back().c_str(), threads, base.batch_size_per_gpu, num_batches, rounds, warmup, steps);
  for (int r = 1; r <= rounds; ++r) {
    // C++: every mode, a fresh trainer from the same weights.
    for (size_t i = 0; i < nm; ++i) {
      const Config c = bench::with_mode(base, kModes[i].mode, kModes[i].every_n);
      const RecomputePlan plan = resolve_plan(c);
      pieces_recomputed[i] = plan.pieces_recomputed();
      pieces_total[i] = plan.pieces_total();
      Trainer t(c, Dataset(c, 0, 1), plan, torch::kCPU);
      load_weights(*t.model(), weights_path);
      torch::manual_seed(base.seed);  // same dropout draws for every mode
      for (int k = 0; k < warmup + steps; ++k) {
        const Batch& b = batches[size_t(k % num_batches)];
        const StepMetrics m = t.step_on(b, k);  // the input tensors are made before its compute starts
        const double sec = m.compute_seconds;
        const int64_t peak = m.peak_bytes - m.start_bytes;
        if (r == 1) cpp_losses[i].push_back(m.loss);
        if (k < warmup) continue;
        cpp_sec[i].push_back(sec);
        cpp_peak_timed[i] = std::max(cpp_peak_timed[i], peak);
      }
      // Two extra steps (batches (W+N) % K and (W+N+1) % K), as the twin profiles them.
      for (int k = warmup + steps; k < warmup + steps + 2; ++k) {
        const StepMetrics m = t.step_on(batches[size_t(k % num_batches)], k);
        cpp_peak[i] = std::max(cpp_peak[i], m.peak_bytes - m.start_bytes);
      }
      std::printf("  round %d C++   %-10s median %8.2f ms\n", r, kModes[i].name,
                  median(std::vector<double>(cpp_sec[i].end() - steps, cpp_sec[i].end())) * 1e3);
      std::fflush(stdout);
    }
    // The twin: every mode, timed internally.
    const std::string tj = (work / ("twin_round" + std::to_string(r) + ".json")).string();
    const std::string log = (work / ("twin_round" + std::to_string(r) + ".log")).string();
    const std::string cmd = "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=" + std::to_string(threads) +
                            " /usr/bin/python3 " + quote(std::string(WG_SOURCE_DIR) + "/tests/reference/twin.py") +
                            " bench --config " + quote(cfg_path) + " --batches " + quote(batches_path) +
                            " --weights " + quote(weights_path) + " --modes " + twin_modes + " --steps " +
                            std::to_string(steps) + " --warmup " + std::to_string(warmup) + " --threads " +
                            std::to_string(threads) + " --out " + quote(tj) + " > " + quote(log) + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream f(log);
      std::cerr << "twin bench failed: " << cmd << "\n" << f.rdbuf() << "\n";
      return 1;
    }
    nlohmann::json doc = nlohmann::json::parse(std::ifstream(tj));
    torch_version = doc.value("torch_version", "");
    torch_memory_method = doc.value("step_peak_bytes_method", "");
    for (const auto& m : doc["modes"]) {
      for (size_t i = 0; i < nm; ++i) {
        if (m["mode"].get<std::string>() != kModes[i].twin_name) continue;
        for (double s : m["step_seconds"]) torch_sec[i].push_back(s);
        torch_peak[i] = std::max(torch_peak[i], m["step_peak_bytes"].get<int64_t>());
        if (r == 1) torch_losses[i] = m["losses"].get<std::vector<double>>();
        std::printf("  round %d torch %-10s median %8.2f ms\n", r, kModes[i].name,
                    m["step_seconds_median"].get<double>() * 1e3);
      }
    }
    std::fflush(stdout);
  }

  // ---- optional: where the C++ step's time goes (mode none), phase by phase,
  // the same phases as the trainer's step_on (lr schedule update left out)
  nlohmann::json phases = nullptr;
  if (breakdown) {
    Trainer t(base, Dataset(base, 0, 1), resolve_plan(bench::with_mode(base, RecomputeMode::None, 1)), torch::kCPU);
    load_weights(*t.model(), weights_path);
    MaskedLoss loss_fn(base);
    auto params = t.model()->parameters();
    std::vector<double> f, b, c, o;
    for (int k = 0; k < warmup + steps * rounds; ++k) {
      const Batch& batch = batches[size_t(k % num_batches)];
      const auto t0 = Clock::now();
      t.optimizer().zero_grad();
      const ModelInput in = to_model_input(batch, torch::kCPU);
      torch::Tensor loss = loss_fn(t.model()->forward(in), masked_targets(in));
      loss.item<double>();
      const auto t1 = Clock::now();
      loss.backward();
      const auto t2 = Clock::now();
      torch::nn::utils::clip_grad_norm_(params, base.grad_clip > 0 ? base.grad_clip : 1e30);
      const auto t3 = Clock::now();
      t.optimizer().step();
      const auto t4 = Clock::now();
      if (k < warmup) continue;
      auto d = [](auto x, auto y) { return std::chrono::duration<double>(y - x).count(); };
      f.push_back(d(t0, t1)), b.push_back(d(t1, t2)), c.push_back(d(t2, t3)), o.push_back(d(t3, t4));
    }
    phases = {{"mode", "none"},
              {"forward_loss_seconds_median", median(f)},
              {"backward_seconds_median", median(b)},
              {"clip_seconds_median", median(c)},
              {"optimizer_seconds_median", median(o)}};
    std::printf("C++ phases (mode none, median ms): forward+loss %.2f, backward %.2f, clip %.2f, AdamW %.2f\n",
                median(f) * 1e3, median(b) * 1e3, median(c) * 1e3, median(o) * 1e3);
  }

  // ---- report (the twin's loss trajectory is its own: it uses a constant lr)
  std::printf("\n%-10s %9s %12s %12s %10s %10s %12s %12s %10s %10s\n", "mode", "pieces", "C++ ms", "torch ms",
              "C++ st/s", "torch st/s", "C++ MiB", "torch MiB", "speedup", "mem ratio");
  nlohmann::json modes = nlohmann::json::array();
  bool all_fast = true, all_small = true;
  for (size_t i = 0; i < nm; ++i) {
    const double tc = median(cpp_sec[i]), tt = median(torch_sec[i]);
    const double speedup = tt / tc, mem_ratio = double(cpp_peak[i]) / double(std::max<int64_t>(torch_peak[i], 1));
    all_fast = all_fast && speedup >= 1.15;
    all_small = all_small && cpp_peak[i] <= torch_peak[i];
    char pieces[32];
    std::snprintf(pieces, sizeof pieces, "%d/%d", pieces_recomputed[i], pieces_total[i]);
    std::printf("%-10s %9s %12.2f %12.2f %10.2f %10.2f %12.2f %12.2f %9.3fx %10.3f\n", kModes[i].name, pieces,
                tc * 1e3, tt * 1e3, 1 / tc, 1 / tt, cpp_peak[i] / kMiB, torch_peak[i] / kMiB, speedup,
                mem_ratio);
    modes.push_back({{"mode", kModes[i].name},
                     {"pieces_recomputed", pieces_recomputed[i]},
                     {"pieces_total", pieces_total[i]},
                     {"cpp_step_seconds_median", tc},
                     {"cpp_steps_per_second", 1 / tc},
                     {"cpp_step_peak_bytes", cpp_peak[i]},
                     {"cpp_step_peak_bytes_max_timed_steps", cpp_peak_timed[i]},
                     {"cpp_step_seconds", cpp_sec[i]},
                     {"cpp_losses_round1", cpp_losses[i]},
                     {"torch_step_seconds_median", tt},
                     {"torch_steps_per_second", 1 / tt},
                     {"torch_step_peak_bytes", torch_peak[i]},
                     {"torch_step_seconds", torch_sec[i]},
                     {"torch_losses_round1", torch_losses[i]},
                     {"speedup_cpp_over_torch", speedup},
                     {"peak_ratio_cpp_over_torch", mem_ratio}});
  }
  std::printf("load average at the end: %s\n", loadavg().c_str());
  std::printf("target: C++ >= 1.15x PyTorch steps/s in every mode: %s; C++ peak <= PyTorch peak in every mode: %s\n",
              all_fast ? "met" : "NOT met", all_small ? "met" : "NOT met");

  nlohmann::json doc = {
      {"title", "C++ (LibTorch) vs PyTorch twin, " + fs::path(sources.files.back()).filename().string() + ", " +
                    std::to_string(threads) + " thread(s), batch " + std::to_string(base.batch_size_per_gpu)},
      {"benchmark", "vs_pytorch"},
      {"config", sources.files.back()},
      {"overrides", sources.overrides},
      {"threads", threads},
      {"blas_threads", 1},
      {"thread_environment", "both processes run with OMP_NUM_THREADS=" + std::to_string(threads) +
                                 " and OPENBLAS_NUM_THREADS=1; intra-op threads set by set_compute_threads (C++) and "
                                 "torch.set_num_threads (twin)"},
      {"loadavg_start", load_start},
      {"loadavg_end", loadavg()},
      {"rounds", rounds},
      {"warmup", warmup},
      {"steps", steps},
      {"num_batches", num_batches},
      {"batch_size_per_gpu", base.batch_size_per_gpu},
      {"torch_version", torch_version},
      {"step_seconds_method",
       "median over all timed steps of all rounds; rounds alternate C++ (all modes) then the twin (all modes); "
       "C++: StepMetrics::compute_seconds of Trainer::step_on (forward, loss, backward, clip, AdamW; the input "
       "tensors are made before it starts); twin: "
       "wall time of its step (zero_grad, forward, loss, backward, clip, AdamW) on pre-built batch tensors"},
      {"cpp_step_peak_bytes_method", kCppMemoryMethod},
      {"torch_step_peak_bytes_method", torch_memory_method},
      {"lr_note", "C++ uses its lr schedule, the twin a constant lr_max; the lr value does not change the work"},
      {"target", {{"speedup_min", 1.15}, {"speedup_met", all_fast}, {"peak_not_above_torch_met", all_small}}},
      {"cpp_phases", phases},
      {"modes", modes}};
  fs::create_directories(out_path.parent_path().empty() ? fs::path(".") : out_path.parent_path());
  std::ofstream(out) << doc.dump(2) << "\n";
  std::printf("wrote %s (inputs and twin outputs in %s)\n", out.c_str(), work.string().c_str());
  if (plot) {
    const std::string png = (out_path.parent_path() / (out_path.stem().string() + ".png")).string();
    const std::string cmd = "/usr/bin/python3 " + quote(std::string(WG_SOURCE_DIR) + "/bench/plot_vs_pytorch.py") +
                            " --in " + quote(out) + " --out " + quote(png);
    if (std::system(cmd.c_str()) != 0) std::cerr << "plot failed: " << cmd << "\n";
  }
  return 0;
}
