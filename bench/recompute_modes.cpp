// Benchmark: step time and memory per recomputation mode, for one model size.
//
// The same mode is applied to every section (embed, latent, pred). All modes
// train side by side in one process, round-robin step by step, so machine
// noise hits them alike; each mode's model starts from the same weights and
// sees the same batches. Reported per mode: median step time after warm-up,
// the step's memory peak above the memory held when the step starts
// (activations, recomputation and temporaries: what checkpointing changes),
// and the activation bytes held at the end of forward. Ratios are against
// mode none.
//
//   bench_recompute_modes [--config F]... [--set K=V]... [--steps N] [--warmup N] [--out FILE]
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "wg/config/loader.h"
#include "wg/plan/recompute_plan.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"
#include "wg/util/threads.h"
#include "wg/util/units.h"

using namespace wg;

namespace {

struct ModeResult {
  std::string name;
  std::vector<double> step_seconds;
  std::vector<int64_t> step_peak_bytes, activation_bytes;
  RecomputePlan plan;
};

template <typename T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}


}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Step time and memory per recomputation mode, all modes side by side", "bench_recompute_modes"};
  ConfigSources sources;
  bench::add_config_options(app, sources);
  int steps = 12, warmup = 3;
  std::string out = "bench/results/recompute_modes.json";
  app.add_option("--steps", steps, "measured steps per mode")->capture_default_str();
  app.add_option("--warmup", warmup, "warm-up steps per mode")->capture_default_str();
  app.add_option("--out", out, "JSON results")->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  bench::default_config(sources);
  spdlog::set_level(spdlog::level::warn);
  install_counting_allocator();
  Config base;
  try {
    base = load_config(sources);
  } catch (const ConfigError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  const int threads = base.num_threads > 0 ? base.num_threads : 1;
  set_compute_threads(threads);

  const struct { const char* name; RecomputeMode mode; int every_n; } modes[] = {
      {"none", RecomputeMode::None, 1},
      {"selective", RecomputeMode::Selective, 1},
      {"every_n=2", RecomputeMode::EveryN, 2},
      {"full", RecomputeMode::Full, 1}};
  std::vector<ModeResult> results;
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (const auto& m : modes) {
    Config c = bench::with_mode(base, m.mode, m.every_n);
    ModeResult r;
    r.name = m.name;
    r.plan = resolve_plan(c);
    trainers.push_back(std::make_unique<Trainer>(c, Dataset(c, 0, 1), r.plan, torch::kCPU));
    results.push_back(std::move(r));
  }
  for (int k = 0; k < warmup + steps; ++k)
    for (size_t i = 0; i < trainers.size(); ++i) {
      const int64_t held = memory_snapshot("cpu").current_bytes;
      torch::manual_seed(1000 + k);  // same dropout draws in every mode
      const StepMetrics m = trainers[i]->step(k % trainers[i]->total_steps());
      if (k < warmup) continue;
      results[i].step_seconds.push_back(m.step_seconds);
      results[i].step_peak_bytes.push_back(m.peak_bytes - held);
      results[i].activation_bytes.push_back(m.activation_bytes);
    }

  const double t_none = median(results[0].step_seconds);
  const double p_none = double(median(results[0].step_peak_bytes));
  std::printf("checkpoint modes: %d steps after %d warm-up, %d thread(s), batch %d, config %s\n", steps, warmup,
              threads, base.batch_size_per_gpu, sources.files.back().c_str());
  std::printf("%-10s %9s %13s %16s %15s %10s %10s\n", "mode", "pieces", "step ms (med)", "step peak MiB",
              "activ. MiB", "time/none", "peak/none");
  std::string json = "{\n  \"benchmark\": \"checkpoint_modes\",\n  \"threads\": " + std::to_string(threads) +
                     ",\n  \"steps\": " + std::to_string(steps) + ",\n  \"batch_size_per_gpu\": " +
                     std::to_string(base.batch_size_per_gpu) + ",\n  \"modes\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const double t = median(r.step_seconds), p = double(median(r.step_peak_bytes)),
                 a = double(median(r.activation_bytes));
    char pieces[32];
    std::snprintf(pieces, sizeof pieces, "%d/%d", r.plan.pieces_recomputed(), r.plan.pieces_total());
    std::printf("%-10s %9s %13.1f %16.2f %15.2f %10.3f %10.3f\n", r.name.c_str(), pieces, t * 1e3, p / kMiB,
                a / kMiB, t / t_none, p / p_none);
    char row[512];
    std::snprintf(row, sizeof row,
                  "    {\"mode\": \"%s\", \"pieces_recomputed\": %d, \"pieces_total\": %d, \"step_seconds_median\": %.6g, "
                  "\"step_peak_bytes_median\": %.0f, \"activation_bytes_median\": %.0f, \"time_ratio_vs_none\": %.4f, "
                  "\"peak_ratio_vs_none\": %.4f}%s\n",
                  r.name.c_str(), r.plan.pieces_recomputed(), r.plan.pieces_total(), t, p, a, t / t_none, p / p_none,
                  i + 1 < results.size() ? "," : "");
    json += row;
  }
  json += "  ]\n}\n";
  const auto slash = out.find_last_of('/');
  if (slash != std::string::npos) std::system(("mkdir -p '" + out.substr(0, slash) + "'").c_str());
  std::ofstream(out) << json;
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
