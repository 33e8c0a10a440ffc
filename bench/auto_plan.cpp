// Benchmark: the automatic planner against measurement. For one model size
// it measures step time and step peak for a sample of plans (the four modes
// and random subsets of pieces), draws their Pareto frontier, and for
// several budgets compares the plan `auto` picks with the fastest measured
// plan that fits the budget. Prints a table, writes JSON; plot with
// bench/plot_auto_plan.py.
//
//   bench_auto_plan [--config F]... [--set K=V]... [--plans N] [--steps N] [--out FILE]
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>

#include "bench_common.h"
#include "wg/config/loader.h"
#include "wg/plan/auto_plan.h"
#include "wg/plan/cost_profile.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"
#include "wg/util/threads.h"
#include "wg/util/units.h"

using namespace wg;

namespace {

struct Measured {
  std::string name;
  RecomputePlan plan;
  double seconds = 0;   // median step time
  int64_t peak = 0;     // largest step peak after the first step
  int64_t predicted = 0;
};

Measured measure(const Config& c, const std::string& name, const RecomputePlan& plan, int steps) {
  Trainer t(c, Dataset(c, 0, 1), plan, torch::kCPU);
  std::vector<double> times;
  Measured m{name, plan};
  for (int k = 0; k < steps + 1; ++k) {
    const StepMetrics s = t.step(k);
    if (k == 0) continue;  // optimizer state allocation, caches
    times.push_back(s.step_seconds);
    m.peak = std::max(m.peak, s.peak_bytes);
  }
  std::sort(times.begin(), times.end());
  m.seconds = times[times.size() / 2];
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The automatic plan against measured plans (Pareto frontier of step time and peak)", "bench_auto_plan"};
  ConfigSources sources;
  bench::add_config_options(app, sources);
  int plans = 40, steps = 5;
  std::string out = "bench/results/auto_plan.json";
  app.add_option("--plans", plans, "random plans measured")->capture_default_str();
  app.add_option("--steps", steps, "steps per plan")->capture_default_str();
  app.add_option("--out", out, "JSON results")->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  bench::default_config(sources);
  spdlog::set_level(spdlog::level::warn);
  install_counting_allocator();
  Config c = load_config(sources);
  c.num_mini_epochs = 100;
  bench::trainer_cpu_setup(c, c.num_threads > 0 ? c.num_threads : 1);

  const RecomputePlan base = resolve_plan(c);
  auto plan_of = [&](const std::function<bool(const PieceKey&)>& on) {
    RecomputePlan p = base;
    for (size_t i = 0; i < p.size(); ++i) p.set(i, on(p.pieces()[i]));
    return p;
  };
  std::vector<Measured> sample;
  sample.push_back(measure(c, "none", plan_of([](const PieceKey&) { return false; }), steps));
  sample.push_back(measure(c, "selective", plan_of([](const PieceKey& k) { return k.is_attention(); }), steps));
  sample.push_back(measure(c, "full", plan_of([](const PieceKey&) { return true; }), steps));
  std::mt19937 rng(7);
  for (int i = 0; i < plans; ++i)
    sample.push_back(measure(c, "random" + std::to_string(i), plan_of([&](const PieceKey&) { return rng() % 2 == 1; }), steps));
  const int64_t none_peak = sample[0].peak, full_peak = sample[2].peak;

  std::printf("auto plan vs the best measured plan that fits (%zu plans measured, %d steps each)\n", sample.size(), steps);
  std::printf("%12s %10s %24s %12s %12s %10s %24s %12s %10s\n", "budget MiB", "fraction", "auto plan", "auto ms",
              "auto MiB", "pred MiB", "best fitting plan", "best ms", "auto/best");
  std::string json = "{\n  \"benchmark\": \"auto_plan\",\n  \"sample\": [\n";
  for (size_t i = 0; i < sample.size(); ++i) {
    char row[256];
    std::snprintf(row, sizeof row, "    {\"name\": \"%s\", \"plan\": \"%s\", \"step_seconds\": %.6g, \"peak_bytes\": %lld}%s\n",
                  sample[i].name.c_str(), sample[i].plan.summary().c_str(), sample[i].seconds, (long long)sample[i].peak,
                  i + 1 < sample.size() ? "," : "");
    json += row;
  }
  json += "  ],\n  \"budgets\": [\n";
  const double fractions[] = {0.1, 0.3, 0.5, 0.7, 0.9};
  for (size_t b = 0; b < 5; ++b) {
    const int64_t budget = full_peak + int64_t(fractions[b] * double(none_peak - full_peak));
    AutoPlan a;
    {  // the planning trainer is gone before the plan is measured: its memory would count
      Trainer t(c, Dataset(c, 0, 1), base, torch::kCPU);
      a = apply_auto_plan(t, budget, RankPlan{base, {}, {}}, c.auto_plan.oom_max_retries);
    }
    Measured m = measure(c, "auto", a.plan, steps);
    m.predicted = a.predicted_peak_bytes;
    const Measured* best = nullptr;
    for (const auto& s : sample)
      if (s.peak <= budget && (!best || s.seconds < best->seconds)) best = &s;
    if (!best || m.seconds < best->seconds) best = &m;
    std::printf("%12.2f %10.2f %24s %12.2f %12.2f %10.2f %24s %12.2f %10.3f%s\n", double(budget) / kMiB,
                fractions[b], a.plan.summary().c_str(), m.seconds * 1e3, double(m.peak) / kMiB,
                double(m.predicted) / kMiB, best->plan.summary().c_str(), best->seconds * 1e3,
                m.seconds / best->seconds, m.peak > budget ? "  OVER BUDGET" : "");
    char row[1024];
    std::snprintf(row, sizeof row,
                  "    {\"budget_bytes\": %lld, \"auto_plan\": \"%s\", \"auto_step_seconds\": %.6g, \"auto_peak_bytes\": %lld, "
                  "\"auto_predicted_peak_bytes\": %lld, \"auto_checked_peak_bytes\": %lld, \"auto_replans\": %d, "
                  "\"best_plan\": \"%s\", \"best_step_seconds\": %.6g, "
                  "\"best_peak_bytes\": %lld, \"auto_over_best\": %.4f}%s\n",
                  (long long)budget, a.plan.summary().c_str(), m.seconds, (long long)m.peak, (long long)m.predicted,
                  (long long)a.checked_peak_bytes, a.replans,
                  best->plan.summary().c_str(), best->seconds, (long long)best->peak, m.seconds / best->seconds,
                  b + 1 < 5 ? "," : "");
    json += row;
  }
  json += "  ]\n}\n";
  const auto slash = out.find_last_of('/');
  if (slash != std::string::npos) std::system(("mkdir -p '" + out.substr(0, slash) + "'").c_str());
  std::ofstream(out) << json;
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
