// Benchmark: step time and step peak per recomputation plan, section by
// section, for one model size.
//
// Plans (rows): none; each of the seven sections alone in `full` (embed,
// ae_local, ae_adapter, ae_aggregation, ae_global, forecast, pred), the rest
// none; every section selective, every_n=2 and full; the default (upstream's
// PR #1168 family: its switches off, aggregation, forecast and the decoder
// blocks recomputed); and the automatic plan (`policy: auto`) at three
// budgets between the peaks of `full` and `none` (25, 50, 75 %) and at
// half of `none`'s step peak.
//
// All plans train side by side in one process, round-robin step by step
// (each round starting one plan further on), so machine noise hits them
// alike; each starts from the same weights, sees the same batches and draws
// the same dropout masks. Reported per plan: median
// step time after warm-up, the step's memory peak above the memory held when
// its compute begins (activations and the gradients backward makes), the
// activation bytes held at the end of forward, and ratios against `none`.
// The budgets are absolute (what `budget_gib` means): they come from `none` and `full` measured alone
// first, and each automatic plan is measured alone again afterwards to check
// that its absolute peak fits: on the batch the planner profiles (its
// prediction's error), and on the other batches of 0-2 (whether a plan
// made on one batch fits others).
//
//   bench_recompute_modes [--config F]... [--set K=V]... [--steps N] [--warmup N] [--rows alone,all,default,auto]
//                         [--out FILE]
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.h"
#include "wg/config/loader.h"
#include "wg/config/recompute_sections.h"
#include "wg/plan/auto_plan.h"
#include "wg/plan/rank_plan.h"
#include "wg/plan/recompute_plan.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"
#include "wg/util/threads.h"
#include "wg/util/units.h"

using namespace wg;
using json = nlohmann::json;

namespace {

// The absolute allocated peaks of a plan trained alone (alone_peaks).
struct AlonePeaks {
  int64_t planning_step = 0;  // the batch the planner profiles (Trainer::planning_step)
  int64_t planning_batch = 0, other_batches = 0;
  int64_t highest() const { return std::max(planning_batch, other_batches); }
};

struct Row {
  std::string name;
  RecomputePlan plan;
  std::vector<double> step_seconds, data_seconds;  // step: without making the batch
  std::vector<int64_t> step_peak_bytes, activation_bytes;
  int64_t budget_bytes = 0, predicted_peak_bytes = 0, checked_peak_bytes = 0;  // automatic plans
  int replans = 0;
  AlonePeaks alone;
};

template <typename T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The absolute allocated peaks of a plan trained alone (the planner's
// budget is absolute), each after a warm-up step on batch 0: on the batch
// the planner profiles (Trainer::planning_step), and the highest on the
// other batches of 0 .. steps.
AlonePeaks alone_peaks(const Config& c, const RecomputePlan& plan, int steps) {
  Trainer t(c, Dataset(c, 0, 1), plan, torch::kCPU);
  AlonePeaks p;
  p.planning_step = t.planning_step();
  t.step(0);
  p.planning_batch = t.step(p.planning_step).peak_bytes;
  for (int64_t k = 0; k <= steps; ++k)
    if (k % t.total_steps() != p.planning_step)
      p.other_batches = std::max(p.other_batches, t.step(k % t.total_steps()).peak_bytes);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Step time and peak per recomputation plan, section by section, side by side",
               "bench_recompute_modes"};
  ConfigSources sources;
  bench::add_config_options(app, sources);
  int steps = 10, warmup = 2;
  std::string out = "bench/results/recompute_modes.json";
  app.add_option("--steps", steps, "measured steps per plan")->capture_default_str();
  app.add_option("--warmup", warmup, "warm-up steps per plan")->capture_default_str();
  app.add_option("--out", out, "JSON results")->capture_default_str();
  std::vector<std::string> group_list = {"alone", "all", "default", "auto"};
  app.add_option("--rows", group_list,
                 "plans to run besides none: alone (each section full alone), all (every section "
                 "selective, every_n=2, full), default (#1168), auto (automatic plans)")
      ->delimiter(',')
      ->check(CLI::IsMember({"alone", "all", "default", "auto"}))
      ->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  const std::set<std::string> groups(group_list.begin(), group_list.end());
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
  bench::trainer_cpu_setup(base, threads);

  const std::vector<PieceKey> pieces = model_pieces(base);
  auto plan_for = [&](const RecomputeConfig& rc) { return resolve_plan(pieces, rc); };
  std::vector<Row> rows;
  auto add = [&](const std::string& name, const RecomputePlan& plan) {
    Row r;
    r.name = name;
    r.plan = plan;
    rows.push_back(std::move(r));
  };
  const RecomputeConfig none = every_section(RecomputeMode::None);
  add("none", plan_for(none));
  for (const auto& s : recompute_sections()) {
    if (!groups.count("alone")) break;
    RecomputeConfig rc = none;
    rc.*(s.field) = SectionRecompute::of(RecomputeMode::Full, true);
    add(s.name + " alone", plan_for(rc));
  }
  if (groups.count("all")) {
    add("all selective", plan_for(every_section(RecomputeMode::Selective)));
    add("all every_n=2", plan_for(every_section(RecomputeMode::EveryN, 2)));
    add("all full", plan_for(every_section(RecomputeMode::Full)));
  }
  if (groups.count("default")) add("default (#1168)", plan_for(RecomputeConfig{}));

  // Budgets from none and full trained alone.
  const AlonePeaks none_alone = alone_peaks(base, rows.front().plan, 2);
  const int64_t none_peak = none_alone.highest();
  const int64_t full_peak = alone_peaks(base, plan_for(every_section(RecomputeMode::Full)), 2).highest();
  const RecomputePlan rules_plan = plan_for(none);
  // Between full's and none's absolute peaks, and one for half of none's
  // step peak (the peak above what a step starts with: parameters and
  // AdamW's moments).
  for (const double fraction : {0.25, 0.5, 0.75, -1.0}) {
    if (!groups.count("auto")) break;
    AutoPlan a;
    char name[64];
    if (fraction > 0) {
      std::snprintf(name, sizeof name, "auto %.0f%%", fraction * 100);
    } else {
      std::snprintf(name, sizeof name, "auto half step");
    }
    int64_t budget = 0;
    try {  // the planning trainer is gone before anything is measured
      Trainer t(base, Dataset(base, 0, 1), rules_plan, torch::kCPU);
      const int64_t held = t.steady_base_bytes();
      budget =
          fraction > 0 ? full_peak + int64_t(fraction * double(none_peak - full_peak)) : held + (none_peak - held) / 2;
      a = apply_auto_plan(t, budget, RankPlan{rules_plan, {}, {}}, base.auto_plan.oom_max_retries);
    } catch (const std::invalid_argument& e) {  // the budgets come from other batches than the planner's
      std::cerr << name << ": no plan: " << e.what() << "\n";
      continue;
    }
    add(name, a.plan);
    rows.back().budget_bytes = budget;
    rows.back().predicted_peak_bytes = a.predicted_peak_bytes;
    rows.back().checked_peak_bytes = a.checked_peak_bytes;
    rows.back().replans = a.replans;
  }

  std::vector<std::unique_ptr<Trainer>> trainers;
  for (const auto& r : rows) trainers.push_back(std::make_unique<Trainer>(base, Dataset(base, 0, 1), r.plan, torch::kCPU));
  // Each round starts one plan further on: the plan that runs first in a
  // round ran 5-7 % slower than the same plan later in it (`none` against
  // `forecast alone` without a forecast engine), whatever the plan.
  for (int k = 0; k < warmup + steps; ++k)
    for (size_t j = 0; j < trainers.size(); ++j) {
      const size_t i = (j + size_t(k)) % trainers.size();
      torch::manual_seed(1000 + k);  // the same dropout draws for every plan
      const StepMetrics m = trainers[i]->step(k % trainers[i]->total_steps());
      if (k < warmup) continue;
      // Without making the batch (reported apart): recomputation does not change it.
      rows[i].step_seconds.push_back(m.step_seconds - m.data_seconds);
      rows[i].data_seconds.push_back(m.data_seconds);
      // Above what was held when its compute began (the other plans' trainers
      // included; this one's last gradients set to none): activations and
      // the gradients backward makes.
      rows[i].step_peak_bytes.push_back(m.peak_bytes - m.start_bytes);
      rows[i].activation_bytes.push_back(m.activation_bytes);
    }
  trainers.clear();
  for (auto& r : rows)
    if (r.budget_bytes > 0) r.alone = alone_peaks(base, r.plan, 2);

  const double t_none = median(rows[0].step_seconds);
  const double p_none = double(median(rows[0].step_peak_bytes));
  std::printf("recomputation per section: %d steps after %d warm-up, %d thread(s), batch %d, config %s\n", steps,
              warmup, threads, base.batch_size_per_gpu, sources.files.back().c_str());
  std::printf("absolute peaks alone: none %.2f MiB, all full %.2f MiB; the planner profiles step %lld's batch\n",
              double(none_peak) / kMiB, double(full_peak) / kMiB, static_cast<long long>(none_alone.planning_step));
  std::printf("%-20s %11s %12s %8s %14s %11s %9s %9s %36s\n", "plan", "pieces", "step ms med", "data ms",
              "step peak MiB", "activ. MiB", "time/none", "peak/none", "auto: budget/pred/planned/others MiB");
  json jrows = json::array();
  for (const auto& r : rows) {
    const double t = median(r.step_seconds), p = double(median(r.step_peak_bytes)),
                 a = double(median(r.activation_bytes));
    char pieces_text[32], auto_text[80] = "";
    std::snprintf(pieces_text, sizeof pieces_text, "%d/%d", r.plan.pieces_recomputed(), r.plan.pieces_total());
    if (r.plan.pieces_lean() > 0)
      std::snprintf(pieces_text + std::strlen(pieces_text), sizeof pieces_text - std::strlen(pieces_text), " %dL",
                    r.plan.pieces_lean());
    if (r.budget_bytes > 0)
      std::snprintf(auto_text, sizeof auto_text, "%.2f/%.2f/%.2f/%.2f%s", double(r.budget_bytes) / kMiB,
                    double(r.predicted_peak_bytes) / kMiB, double(r.alone.planning_batch) / kMiB,
                    double(r.alone.other_batches) / kMiB, r.alone.highest() <= r.budget_bytes ? "" : " over");
    const double d = median(r.data_seconds);
    std::printf("%-20s %11s %12.1f %8.1f %14.2f %11.2f %9.3f %9.3f %36s\n", r.name.c_str(), pieces_text, t * 1e3,
                d * 1e3, p / kMiB, a / kMiB, t / t_none, p / p_none, auto_text);
    json row = {{"plan", r.name},
                {"summary", r.plan.summary()},
                {"pieces_recomputed", r.plan.pieces_recomputed()},
                {"pieces_total", r.plan.pieces_total()},
                {"pieces_lean", r.plan.pieces_lean()},
                {"step_seconds_median", t},
                {"data_seconds_median", d},
                {"step_peak_bytes_median", p},
                {"activation_bytes_median", a},
                {"time_ratio_vs_none", t / t_none},
                {"peak_ratio_vs_none", p / p_none}};
    if (r.budget_bytes > 0) {
      row["budget_bytes"] = r.budget_bytes;
      row["predicted_peak_bytes"] = r.predicted_peak_bytes;
      row["checked_peak_bytes"] = r.checked_peak_bytes;  // the planner's own check, on the batches it planned from
      row["replans"] = r.replans;
      row["alone_peak_bytes"] = r.alone.highest();
      row["alone_peak_planning_batch_bytes"] = r.alone.planning_batch;
      row["planning_step"] = r.alone.planning_step;
      row["alone_peak_other_batches_bytes"] = r.alone.other_batches;
      row["fits"] = r.alone.highest() <= r.budget_bytes;
    }
    jrows.push_back(row);
  }
  const json doc = {{"benchmark", "recompute_sections"},
                    {"config", sources.files.back()},
                    {"overrides", sources.overrides},
                    {"threads", threads},
                    {"steps", steps},
                    {"warmup", warmup},
                    {"rows", group_list},
                    {"batch_size_per_gpu", base.batch_size_per_gpu},
                    {"none_alone_peak_bytes", none_peak},
                    {"planning_step", none_alone.planning_step},
                    {"full_alone_peak_bytes", full_peak},
                    {"method",
                     "round-robin step by step in one process, same weights, batches and dropout draws; step peak = "
                     "allocated peak during the step minus bytes held when its compute began, the last gradients set "
                     "to none (counting allocator): activations and the gradients backward makes; auto "
                     "plans' alone peak = absolute allocated peak trained alone, on the batch the planner profiles "
                     "(planning_step) and on the other batches of 0-2, each after a warm-up step on batch 0; budgets "
                     "from the highest of none's and full's; 'auto half step': held at a step's start (parameters, "
                     "AdamW's moments) plus half of none's peak above it, trained alone"},
                    {"plans", jrows}};
  const std::filesystem::path out_path(out);
  if (out_path.has_parent_path()) std::filesystem::create_directories(out_path.parent_path());
  std::ofstream(out) << doc.dump(2) << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
