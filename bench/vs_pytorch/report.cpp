// bench_vs_pytorch's report (see report.h).
#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "text.h"
#include "wg/util/onednn_sgemm.h"
#include "wg/util/threads.h"
#include "wg/util/units.h"

namespace wg::bench::vs {
namespace {

// The targets, met or not over the modes both sides ran.
struct Targets {
  bool all_fast = true, all_small = true, plans_match = true;
  bool fast_none = true, fast_others = true, fast_sgemm = true;
};

// Each mode's model FLOP rate: the FLOPs of all its timed steps over their time.
std::vector<double> flop_rates(const std::vector<ModeResult>& results) {
  std::vector<double> rate;
  for (const ModeResult& r : results) {
    double flop_sum = 0, sec_sum = 0;
    for (size_t k = 0; k < r.cpp_flops.size(); ++k) flop_sum += r.cpp_flops[k], sec_sum += r.cpp_seconds[k];
    rate.push_back(sec_sum > 0 ? flop_sum / sec_sum : 0);
  }
  return rate;
}

// The table, one row per mode; the modes' JSON.
json mode_table(const std::vector<ModeResult>& results, const RunFacts& f, const std::vector<double>& rate,
                double sgemm_rate, Targets& t) {
  std::printf("\n%-10s %7s %9s %9s %9s %9s %9s %9s %9s %9s %8s %6s\n", "mode", "pieces", "C++ ms", "twin ms",
              "C++ st/s", "twin st/s", "C++ MiB", "twin MiB", "speed-up", "peak C/T", "GFLOP/s", "sgemm");
  json modes = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const ModeResult& r = results[i];
    const double tc = median(r.cpp_seconds), tt = median(r.torch_seconds);
    const bool both = f.run_cpp() && f.run_twin() && !r.mode.configured;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double speedup = both ? tt / tc : nan,
                 peak_ratio = both ? double(r.cpp_peak) / double(std::max<int64_t>(r.torch_peak, 1)) : nan;
    if (both) {
      t.all_fast = t.all_fast && speedup >= 1.15;
      (r.mode.mode == RecomputeMode::None ? t.fast_none : t.fast_others) &=
          speedup >= (r.mode.mode == RecomputeMode::None ? 1.5 : 1.3);
      t.all_small = t.all_small && r.cpp_peak <= r.torch_peak;
      if (r.pieces_lean == 0) t.plans_match = t.plans_match && r.cpp_keys == r.torch_keys;
    }
    char pieces[32];
    std::snprintf(pieces, sizeof pieces, "%d/%d", r.pieces_recomputed, r.pieces_total);
    if (!r.mode.configured) t.fast_sgemm = t.fast_sgemm && rate[i] >= 0.6 * sgemm_rate;  // the modes
    std::string note;
    if (r.mode.configured)
      note = "  (C++ only: the configured plan, " + std::to_string(r.pieces_lean) + " pieces lean)";
    else if (r.pieces_lean > 0)  // selective: lean here, whole attention pieces in the twin (its checkpoint API)
      note = "  (C++: " + std::to_string(r.pieces_lean) + " pieces lean; the twin recomputes " +
             std::to_string(r.torch_pieces) + " pieces whole)";
    else if (both && r.cpp_keys != r.torch_keys)
      note = "  (the twin recomputes other pieces!)";
    std::printf("%-10s %7s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %8.3fx %9.3f %8.1f %5.0f%%%s\n", r.mode.name, pieces,
                tc * 1e3, tt * 1e3, 1 / tc, 1 / tt, r.cpp_peak / kMiB, r.torch_peak / kMiB, speedup, peak_ratio,
                rate[i] * 1e-9, 100 * rate[i] / sgemm_rate, note.c_str());
    double loss_diff_3 = 0;  // the first 3 steps, with dropout (the sides draw different masks)
    for (size_t k = 0; k < 3 && k < r.cpp_losses.size() && k < r.torch_losses.size(); ++k)
      loss_diff_3 = std::max(loss_diff_3, std::abs(r.cpp_losses[k] - r.torch_losses[k]) / std::abs(r.cpp_losses[k]));
    json m = {{"mode", r.mode.name},
              {"pieces_recomputed", r.pieces_recomputed},
              {"pieces_total", r.pieces_total},
              {"pieces_lean", r.pieces_lean},
              {"torch_pieces_recomputed", r.torch_pieces},
              {"recomputed_pieces_match", r.cpp_keys == r.torch_keys},
              {"cpp_step_seconds_median", f.run_cpp() ? json(tc) : json(nullptr)},
              {"cpp_steps_per_second", f.run_cpp() ? json(1 / tc) : json(nullptr)},
              {"cpp_step_peak_bytes", f.run_cpp() ? json(r.cpp_peak) : json(nullptr)},
              {"cpp_step_peak_bytes_max_timed_steps", r.cpp_peak_timed},
              {"cpp_activation_peak_bytes", f.activation_peaks ? json(r.activation.peak) : json(nullptr)},
              {"cpp_activation_forward_end_bytes", f.activation_peaks ? json(r.activation.forward_end) : json(nullptr)},
              {"cpp_step_seconds", r.cpp_seconds},
              {"cpp_model_flops_per_step_median", median(r.cpp_flops)},
              {"cpp_model_flops_per_second", rate[i]},
              {"cpp_share_of_sgemm_rate", rate[i] / sgemm_rate},
              {"cpp_losses_round1", r.cpp_losses},
              {"cpp_phase_seconds_median", r.cpp_phases},
              {"torch_step_seconds_median", f.run_twin() ? json(tt) : json(nullptr)},
              {"torch_steps_per_second", f.run_twin() ? json(1 / tt) : json(nullptr)},
              {"torch_step_peak_bytes", f.run_twin() ? json(r.torch_peak) : json(nullptr)},
              {"torch_step_seconds", r.torch_seconds},
              {"torch_losses_round1", r.torch_losses},
              {"torch_phase_seconds_median", r.torch_phases},
              {"loss_max_relative_difference_first3", loss_diff_3},
              {"speedup_cpp_over_torch", both ? json(speedup) : json(nullptr)},
              {"peak_ratio_cpp_over_torch", both ? json(peak_ratio) : json(nullptr)}};
    if (f.twin.cuda) {
      m["cpp_peak_reserved_bytes"] = r.cpp_reserved;
      m["torch_peak_reserved_bytes"] = r.torch_reserved;
      m["cpp_mfu"] = rate[i] / f.peak.flops;
    }
    modes.push_back(m);
  }
  return modes;
}

// On a GPU: reserved memory and MFU; the model FLOPs of `none` (no
// recomputation) put both sides alike.
void gpu_table(const std::vector<ModeResult>& results, const RunFacts& f, const std::vector<double>& rate,
               json& modes) {
  double none_flops = std::nan("");
  for (const ModeResult& r : results)
    if (is_none(r.mode)) none_flops = median(r.cpp_flops);
  std::printf("\n%-10s %13s %13s %9s %14s %14s   (peak %.1f TFLOP/s: %s)\n", "mode", "C++ res GiB", "twin res GiB",
              "C++ MFU", "C++ MFU/none", "twin MFU/none", f.peak.flops * 1e-12, f.peak.source.c_str());
  for (size_t i = 0; i < results.size(); ++i) {
    const ModeResult& r = results[i];
    const double tc = median(r.cpp_seconds), tt = median(r.torch_seconds);
    const double mfu_c = none_flops / tc / f.peak.flops, mfu_t = none_flops / tt / f.peak.flops;
    std::printf("%-10s %13.2f %13.2f %8.1f%% %13.1f%% %13.1f%%\n", r.mode.name, r.cpp_reserved / kGiB,
                r.torch_reserved / kGiB, 100 * rate[i] / f.peak.flops, 100 * mfu_c, 100 * mfu_t);
    modes[i]["cpp_mfu_model_flops_of_none"] = mfu_c;
    modes[i]["torch_mfu_model_flops_of_none"] = mfu_t;
  }
}

// The cost of recomputation on the C++ side: each mode's step time and peak against none's.
json cost_against_none(const std::vector<ModeResult>& results, const RunFacts& f) {
  json cost = json::object();
  if (f.run_cpp() && is_none(results[0].mode)) {
    const double t_none = median(results[0].cpp_seconds);
    std::string line;
    for (size_t i = 1; i < results.size(); ++i) {
      const ModeResult& r = results[i];
      const double time_ratio = median(r.cpp_seconds) / t_none;
      const double peak_cut = 1.0 - double(r.cpp_peak) / double(std::max<int64_t>(results[0].cpp_peak, 1));
      const double act_cut = 1.0 - double(r.activation.peak) / double(std::max<int64_t>(results[0].activation.peak, 1));
      cost[r.mode.name] = {{"step_time_over_none", time_ratio},
                           {"peak_cut_from_none", f.profiled > 0 ? json(peak_cut) : json(nullptr)},
                           {"activation_peak_cut_from_none", f.activation_peaks ? json(act_cut) : json(nullptr)}};
      char part[192];
      std::snprintf(part, sizeof part, "%s%s %.3fx the time", line.empty() ? "" : "; ", r.mode.name, time_ratio);
      line += part;
      if (f.profiled > 0) {  // no profiled steps: no peaks
        std::snprintf(part, sizeof part, ", %.1f %% less peak", 100 * peak_cut);
        line += part;
      }
      if (f.activation_peaks) {
        std::snprintf(part, sizeof part, ", %.1f %% less activation peak", 100 * act_cut);
        line += part;
      }
    }
    std::printf("C++ against its own none: %s (targets: full <= 1.3x; selective <= 1.1x cutting >= 50 %%)\n",
                line.c_str());
  }
  return cost;
}

// The activation peaks, the load, the reference rate, the targets, the phases.
void print_summary(const std::vector<ModeResult>& results, const RunFacts& f, const Targets& t) {
  if (f.activation_peaks) {
    std::printf("C++ activation peaks, MiB (held at the end of forward):");
    for (size_t i = 0; i < results.size(); ++i)
      std::printf("%s %s %.2f (%.2f)", i > 0 ? ";" : "", results[i].mode.name,
                  double(results[i].activation.peak) / kMiB, double(results[i].activation.forward_end) / kMiB);
    std::printf("\n");
  }
  std::printf("load average at the start %s, at the end %s\n", f.load_start.c_str(), f.load_end.c_str());
  std::printf("%s: %.1f GFLOP/s before the runs, %.1f after\n", f.sgemm_label.c_str(), f.sgemm[0] * 1e-9,
              f.sgemm[1] * 1e-9);
  if (f.run_cpp() && f.run_twin())
    std::printf(
        "targets: C++ >= 1.5x the twin's steps/s in none: %s; >= 1.3x in the other modes: %s; C++ peak <= the "
        "twin's in every mode: %s; model FLOP/s >= 60%% of sgemm in every mode: %s%s\n",
        t.fast_none ? "met" : "NOT met", t.fast_others ? "met" : "NOT met", t.all_small ? "met" : "NOT met",
        t.fast_sgemm ? "met" : "NOT met", t.plans_match ? "" : "; the two sides' recomputed pieces differ");
  if (f.breakdown && f.run_cpp()) {
    std::printf("C++ phases (median ms): mode       forward+loss backward    clip   AdamW clip+AdamW\n");
    for (const ModeResult& r : results)
      std::printf("                        %-10s %10.2f %8.2f %7s %7s %10.2f  (one fused pass)\n", r.mode.name,
                  r.cpp_phases["forward_loss"].get<double>() * 1e3, r.cpp_phases["backward"].get<double>() * 1e3, "",
                  "", r.cpp_phases["clip_optimizer"].get<double>() * 1e3);
  }
  if (f.run_twin() && !results[0].torch_phases.is_null()) {
    std::printf("twin phases (median ms): mode      forward+loss backward    clip   AdamW clip+AdamW\n");
    for (const ModeResult& r : results)
      if (!r.torch_phases.is_null()) {
        const double clip = r.torch_phases["clip"].get<double>(), opt = r.torch_phases["optimizer"].get<double>();
        std::printf("                        %-10s %10.2f %8.2f %7.2f %7.2f %10.2f\n", r.mode.name,
                    r.torch_phases["forward_loss"].get<double>() * 1e3, r.torch_phases["backward"].get<double>() * 1e3,
                    clip * 1e3, opt * 1e3, (clip + opt) * 1e3);
      }
  }
}

// The JSON document.
json run_document(const RunFacts& f, const Targets& t, json modes, json cost) {
  const std::string cfg_name = join_files(f.config_files, true);
  const std::string thread_environment =
      "both processes run with OMP_NUM_THREADS=" + std::to_string(f.twin.threads) +
      (f.twin.blas_omp ? " (the OpenMP OpenBLAS takes these threads on both sides)" : " and OPENBLAS_NUM_THREADS=1") +
      "; intra-op threads set by set_compute_threads (C++) and torch.set_num_threads (twin)";
  return {{"title", "C++ (LibTorch) vs PyTorch twin, " + cfg_name + ", " + std::to_string(f.twin.threads) +
                        " thread(s), batch " + std::to_string(f.batch_size) + ", " + today()},
          {"benchmark", "vs_pytorch"},
          {"date", today()},
          {"config", join_files(f.config_files, false)},
          {"overrides", f.overrides},
          {"parameters", f.parameters},
          {"threads", f.twin.threads},
          {"blas", blas_kind()},
          {"cpp_sgemm", sgemm_provider()},
          {"cpp_keep_freed_mib", f.keep_freed_mib},
          {"blas_threads", blas_threads()},
          {"thread_environment", thread_environment},
          {"device", f.device},
          {"sgemm_flops_per_second", f.sgemm},
          {"sgemm_method", f.sgemm_label},
          {"peak_flops", f.twin.cuda ? json(f.peak.flops) : json(nullptr)},
          {"peak_flops_source", f.peak.source},
          {"model_flops_method",
           "wg/model/flops.h: matrix products of forward, backward (2x forward) and recomputation, "
           "counted from the batch shapes; the rate is the timed steps' FLOPs over their "
           "compute_seconds"},
          {"side", f.side},
          {"loadavg_start", f.load_start},
          {"loadavg_end", f.load_end},
          {"rounds", f.rounds},
          {"warmup", f.warmup},
          {"steps", f.steps},
          {"profiled_steps", f.profiled},
          {"num_batches", f.num_batches},
          {"dumps", f.twin.dumps},
          {"dump_losses", f.dump_losses},
          {"batch_size_per_gpu", f.batch_size},
          {"torch_version", f.twin_facts.torch_version},
          {"optimizer",
           {{"lr_per_step", f.twin.lrs},
            {"beta1_per_step", f.twin.beta1s},
            {"beta2", f.twin.beta2},
            {"eps", f.twin.eps},
            {"weight_decay", f.twin.weight_decay},
            {"grad_clip", f.twin.grad_clip},
            {"note",
             "both sides: AdamW with step k's lr and beta1 from the C++ LrSchedule (upstream's), clipping over "
             "all parameters; the C++ weight average (validate_with_ema) is off"}}},
          {"dropout", "as configured on both sides (the prediction engine's fixed 0.1, embed_dropout_final_rate " +
                          std::to_string(f.twin.embed_dropout_final_rate) +
                          "); the two sides draw different masks, so their losses "
                          "agree only roughly; loss_parity compares them without dropout"},
          {"loss_parity", f.parity},
          {"step_seconds_method",
           "median over all timed steps of all rounds; rounds alternate C++ (all modes, step by step in turn) then the "
           "twin (all modes); "
           "C++: StepMetrics::compute_seconds of Trainer::step_on (gradients set to none, forward, loss, backward, "
           "clip, AdamW; the input tensors are made before it starts); twin: " +
               f.twin_facts.time_method},
          {"cpp_step_peak_bytes_method", kCppMemoryMethod},
          {"cpp_activation_peak_bytes_method", kCppActivationPeakMethod},
          {"torch_step_peak_bytes_method", f.twin_facts.memory_method},
          {"target",
           {{"speedup_min_none", 1.5},
            {"speedup_none_met", t.fast_none},
            {"speedup_min_other_modes", 1.3},
            {"speedup_other_modes_met", t.fast_others},
            {"speedup_1_15_every_mode_met", t.all_fast},
            {"peak_not_above_torch_met", t.all_small},
            {"model_flops_share_of_sgemm_min", 0.6},
            {"model_flops_share_met", t.fast_sgemm},
            {"recomputed_pieces_match", t.plans_match}}},
          {"modes", modes},
          {"cpp_cost_against_none", cost}};
}

}  // namespace

void report(const std::vector<ModeResult>& results, const RunFacts& f) {
  const double sgemm_rate = *std::max_element(f.sgemm.begin(), f.sgemm.end());
  const std::vector<double> rate = flop_rates(results);
  Targets t;
  json modes = mode_table(results, f, rate, sgemm_rate, t);
  if (f.twin.cuda) gpu_table(results, f, rate, modes);
  const json cost = cost_against_none(results, f);
  print_summary(results, f, t);
  const json doc = run_document(f, t, modes, cost);

  const std::filesystem::path out_path(f.out);
  const std::filesystem::path out_dir = out_path.parent_path().empty() ? "." : out_path.parent_path();
  std::filesystem::create_directories(out_dir);
  std::ofstream(f.out) << doc.dump(2) << "\n";
  std::printf("wrote %s (dumps and twin outputs in %s)\n", f.out.c_str(), f.work_dir.c_str());
  if (f.plot && f.run_cpp() && f.run_twin()) {
    const std::string png = (out_dir / (out_path.stem().string() + ".png")).string();
    const std::string cmd = "/usr/bin/python3 " + quote(std::string(WG_SOURCE_DIR) + "/bench/plot_vs_pytorch.py") +
                            " --in " + quote(f.out) + " --out " + quote(png);
    if (std::system(cmd.c_str()) != 0) std::cerr << "plot failed: " << cmd << "\n";
  }
}

}  // namespace wg::bench::vs
