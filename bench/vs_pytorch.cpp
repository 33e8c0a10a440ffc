// Benchmark: this trainer against its PyTorch twin (tests/reference/wg_*.py,
// eager PyTorch written from the model spec), per recomputation mode, on the
// same model, config, batches, initial weights, optimizer settings per step
// (upstream's lr schedule and β1, AdamW, clipping), dropout, thread count
// and BLAS threads.
//
// Set-up: loads the config (default config/cpu_small.yml) and writes K step
// dumps (docs/step-dump.md, float32) of the run's batches 0 … K−1 with
// write_step_dump: the twin builds its model from the first dump's metadata,
// loads its weights and tables, and trains on the dumps' batches. Then a
// short loss-parity run without dropout (both sides, mode none: the losses
// must agree), then R rounds, alternating: C++ all modes (each a fresh
// Trainer with the dumps' weights; the modes step in turn, step by step:
// W warm-up + N timed steps of step_on(batch k % K, k), then P untimed
// steps for the peak), then the twin (`wg_twin.py bench`) all modes. Per
// mode and side: median step time over all rounds, steps/s, step peak
// memory, the C++/twin steps/s and peak ratios; per C++ mode also its
// activation peak (a separate run: the step's peak with every gradient held
// from its start, so without the gradients). Writes a table, JSON (bench/plot_vs_pytorch.py reads it) and the
// plot.
//
// What is timed, on both sides: a training step on batch tensors made
// before it (C++: StepMetrics::compute_seconds of Trainer::step_on: the
// gradients set to none, forward, loss, backward, clipping, AdamW; the twin:
// the same, zero_grad(set_to_none=True), wall time).
// The weight average (validate_with_ema) is switched off here, as the twin
// has none; the loader's threads are off (step_on does not use them).
//
//   bench_vs_pytorch [--config F]... [--set K=V]... [--threads 2] [--rounds 3] [--warmup 2] [--steps 10]
//                    [--batches 4] [--profiled-steps 2] [--parity-steps 4] [--side both|cpp|twin]
//                    [--modes none,full,selective,every_n=2,config]
//                    [--breakdown] [--no-activation-peaks] [--pieces] [--trace FILE]
//                    [--out bench/results/vs_pytorch.json] [--no-plot]
//                    [--device cpu|cuda] [--python PATH]
//
// --modes config adds the plan the --config files and --set give (say
// `selective` with some pieces recomputed whole, docs/recomputation.md) on
// the C++ side only: timed, its peaks measured and set against none's as
// the other modes, with no twin to compare.
//
// --device cuda (bench/gpu/run.sh): both sides on the GPU, the twin under
// torch >= 2.0 (--python; its attention then runs torch's fused
// scaled_dot_product_attention over the padded layout), both under bf16
// autocast where with_mixed_precision is set; times after a device
// synchronisation; peaks from the caching allocators (the step's above its
// start, and the reserved peak); the reference rate an 8192^3 product on the
// GPU, and MFU against its data-sheet peak.
//
// The pieces: vs_pytorch/cpp_side.h (the C++ measurements), twin.h (the
// twin's command), results.h (per mode, round by round), report.h (the
// table, the targets, the JSON and the plot).
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "vs_pytorch/cpp_side.h"
#include "vs_pytorch/report.h"
#include "vs_pytorch/results.h"
#include "vs_pytorch/text.h"
#include "vs_pytorch/twin.h"
#include "wg/config/loader.h"
#include "wg/data/dataset.h"
#include "wg/dist/devices.h"
#include "wg/train/lr_schedule.h"
#include "wg/train/step_dump.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"
#include "wg/util/onednn_sgemm.h"
#include "wg/util/peak_flops.h"
#include "wg/util/side_thread.h"
#include "wg/util/threads.h"
#include "wg/util/units.h"

using namespace wg;
using namespace wg::bench::vs;
namespace fs = std::filesystem;

namespace {

struct Options {
  ConfigSources sources;
  int threads = 2, rounds = 3, warmup = 2, steps = 10, num_batches = 4, profiled = 2, parity_steps = 4;
  bool no_plot = false, breakdown = false, pieces = false, no_activation_peaks = false;
  std::string out = "bench/results/vs_pytorch.json", side = "both", trace, device_name = "cpu",
              python = "/usr/bin/python3";
  std::vector<std::string> mode_names;
};

Options parse_options(int argc, char** argv) {
  CLI::App app{"The C++ trainer against its PyTorch twin (tests/reference/wg_*.py), per recomputation mode",
               "bench_vs_pytorch"};
  Options o;
  bench::add_config_options(app, o.sources);
  for (const Mode& m : all_modes()) o.mode_names.push_back(m.name);
  app.add_option("--threads", o.threads, "intra-op threads of both sides (BLAS: 1)")->capture_default_str();
  app.add_option("--rounds", o.rounds, "alternating rounds")->capture_default_str();
  app.add_option("--warmup", o.warmup, "warm-up steps per mode and round")->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps per mode and round")->capture_default_str();
  app.add_option("--batches", o.num_batches, "K: step dumps (batches 0 … K-1) cycled through")->capture_default_str();
  app.add_option("--profiled-steps", o.profiled, "untimed steps per mode and round measured for the peak")
      ->capture_default_str();
  app.add_option("--parity-steps", o.parity_steps, "steps of the loss-parity run without dropout (0: none)")
      ->capture_default_str();
  app.add_option("--side", o.side, "run both sides, or only one (for profiling)")
      ->check(CLI::IsMember({"both", "cpp", "twin"}))
      ->capture_default_str();
  app.add_option("--modes", o.mode_names,
                 "modes to run (subset of none full selective every_n=2 config; config: the plan of the --config "
                 "files and --set, C++ only)")
      ->check(CLI::IsMember({"none", "full", "selective", "every_n=2", "config"}))
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--out", o.out, "JSON results")->capture_default_str();
  app.add_option("--device", o.device_name,
                 "cpu, or cuda (both sides on the GPU; the twin needs torch >= 2.0, and runs under bf16 autocast when "
                 "with_mixed_precision is set, as the C++ side does)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--python", o.python, "the twin's Python, with its torch")->capture_default_str();
  app.add_flag("--breakdown", o.breakdown, "also time the C++ step's phases per mode (a separate run)");
  app.add_flag("--no-activation-peaks", o.no_activation_peaks,
               "skip the run per C++ mode that measures its activation peak (the step's peak without the gradients)");
  app.add_flag("--pieces", o.pieces,
               "also print each piece's forward time, FLOP rate and kept memory (none, selective)");
  app.add_option("--trace", o.trace,
                 "also write a chrome trace (LibTorch's profiler) of 5 C++ steps of the first mode");
  app.add_flag("--no-plot", o.no_plot, "skip the plot");
  bench::parse_or_exit(app, argc, argv);
  bench::default_config(o.sources);
  return o;
}

// Same thread environment as the twin's process: OpenMP reads it when it
// loads, so the benchmark re-executes itself once with it set. With the
// OpenMP OpenBLAS both sides' matrix products take the OpenMP threads; any
// other BLAS is held to one thread on both sides. Returns only where the
// environment was right already (or the re-exec failed).
void reexec_with_thread_environment(int threads, bool blas_omp, char** argv) {
  const std::string omp = std::to_string(std::max(1, threads));
  const char* have_omp = std::getenv("OMP_NUM_THREADS");
  const char* have_blas = std::getenv("OPENBLAS_NUM_THREADS");
  const bool blas_env_ok = blas_omp ? have_blas == nullptr : (have_blas && std::string(have_blas) == "1");
  if (have_omp && omp == have_omp && blas_env_ok) return;
  ::setenv("OMP_NUM_THREADS", omp.c_str(), 1);
  if (blas_omp)
    ::unsetenv("OPENBLAS_NUM_THREADS");
  else
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  // execv keeps this thread's CPUs, which OpenMP bound to one place under
  // OMP_PROC_BIND: the new process's OpenMP would see that one CPU only.
  unbind_side_thread("bench_vs_pytorch");
  ::execv("/proc/self/exe", argv);
  std::perror("bench_vs_pytorch: re-exec with OMP_NUM_THREADS set failed; continuing");
}

// The modes --modes names, in the report's order (config last).
std::vector<Mode> chosen_modes(const std::vector<std::string>& names) {
  const auto named = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  std::vector<Mode> modes;
  for (const Mode& m : all_modes())
    if (named(m.name)) modes.push_back(m);
  if (named(config_mode().name)) modes.push_back(config_mode());
  return modes;
}

// What both sides start from: K step dumps of the run's batches (weights,
// tables, batches), the initial weights, and the lr and β1 of each step.
struct Inputs {
  std::vector<BuiltBatch> batches;
  Weights weights;
  std::vector<double> dump_losses;
  int64_t parameters = 0;
};
Inputs write_inputs(const Config& base, const torch::Device& device, const fs::path& work, int num_batches,
                    int schedule_steps, TwinSettings& twin) {
  Inputs in;
  const Config c = bench::with_mode(base, RecomputeMode::None, 1);
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), device);
  for (int k = 0; k < num_batches; ++k) {
    in.batches.push_back(t.batch(k % t.total_steps()));
    const std::string path = (work / ("step" + std::to_string(k) + ".safetensors")).string();
    in.dump_losses.push_back(write_step_dump(path, t, c, in.batches.back(), k, /*float64=*/false));
    twin.dumps.push_back(path);
  }
  for (const auto& p : t.model()->named_parameters()) in.weights.emplace_back(p.key(), p.value().detach().clone());
  for (int k = 0; k < schedule_steps; ++k) {
    twin.lrs.push_back(t.schedule().at(k));
    twin.beta1s.push_back(t.schedule().beta1_at(k));
  }
  const AdamConstants adam = adam_constants(int64_t(c.batch_size_per_gpu));
  twin.beta2 = adam.beta2;
  twin.eps = adam.eps;
  in.parameters = t.parameter_count();
  return in;
}

// Loss parity without dropout (mode none): the two implementations must agree.
json loss_parity(const Config& base, const torch::Device& device, const Inputs& in, const TwinSettings& twin,
                 const fs::path& work, int steps, bool bf16) {
  const CppRun c = run_cpp(base, device, {all_modes()[0]}, in.batches, in.weights, 0, steps, 0, false)[0];
  const std::string tj = (work / "twin_parity.json").string(), log = (work / "twin_parity.log").string();
  const json doc = run_twin(twin_command(twin, "none", 0, steps, 0, false, tj, log), log, tj);
  const std::vector<double> tl = doc["modes"][0]["losses"].get<std::vector<double>>();
  double worst = 0;
  for (size_t k = 0; k < c.losses.size() && k < tl.size(); ++k)
    worst = std::max(worst, std::abs(c.losses[k] - tl[k]) / std::max(1e-30, std::abs(c.losses[k])));
  std::printf(
      "loss parity (no dropout, %d steps): C++ %s\n                                     twin %s\n"
      "  max relative difference %.2e%s\n",
      steps, join_doubles(c.losses).substr(0, 90).c_str(), join_doubles(tl).substr(0, 90).c_str(), worst,
      bf16           ? "  (bf16 autocast: the two sides round differently)"
      : worst < 1e-3 ? ""
                     : "  <-- the two sides do not train the same model");
  std::fflush(stdout);
  return {{"steps", steps},         {"mode", "none"},     {"dropout", "off"},
          {"cpp_losses", c.losses}, {"torch_losses", tl}, {"max_relative_difference", worst}};
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  const bool blas_omp = std::string(blas_kind()) == "openblas-openmp";
  reexec_with_thread_environment(o.threads, blas_omp, argv);
  if (o.steps < 1 || o.rounds < 1 || o.num_batches < 1 || o.warmup < 0 || o.threads < 1 || o.profiled < 0 ||
      o.parity_steps < 0) {
    std::cerr << "--steps, --rounds, --batches and --threads must be >= 1; --warmup, --profiled-steps and "
                 "--parity-steps >= 0\n";
    return 2;
  }
  const bool run_cpp_side = o.side != "twin", run_twin_side = o.side != "cpp";
  const torch::Device device(o.device_name == "cuda" ? "cuda:0" : o.device_name);  // one GPU: the first
  const bool cuda = device.is_cuda();
  if (cuda && !torch::cuda::is_available()) {
    std::cerr << "--device cuda: this LibTorch sees no CUDA device\n";
    return 2;
  }
  if (cuda && (o.pieces || !o.trace.empty())) {
    std::cerr << "--pieces and --trace measure the CPU step only; leave them out with --device cuda\n";
    return 2;
  }
  const std::vector<Mode> modes = chosen_modes(o.mode_names);
  if (run_twin_side && std::all_of(modes.begin(), modes.end(), [](const Mode& m) { return m.configured; })) {
    std::cerr << "--modes config runs on the C++ side only: add --side cpp, or a mode the twin has\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  install_counting_allocator();
  Config base;
  std::vector<RecomputePlan> plans;  // per mode, resolved before any work (the configured plan's pieces checked)
  try {
    base = load_config(o.sources);
    for (const Mode& m : modes) plans.push_back(resolve_plan(mode_config(base, m)));
  } catch (const ConfigError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {  // the configured plan names a piece the model lacks
    std::cerr << "configuration: " << e.what() << "\n";
    return 2;
  }
  base.validate_with_ema = false;  // the twin keeps no weight average
  base.loader_num_workers = 0;     // step_on takes its batch; no loader threads
  RunFacts f;
  const bool keeps_freed = bench::trainer_cpu_setup(base, o.threads);  // as wgtrain (the twin: PyTorch's defaults)

  // ---- shared inputs: K step dumps (weights, tables, batches), the per-step lr and β1
  const fs::path out_path(o.out);
  const fs::path out_dir = out_path.parent_path().empty() ? fs::path(".") : out_path.parent_path();
  const fs::path work = out_dir / (out_path.stem().string() + "_work");
  fs::create_directories(work);
  TwinSettings& twin = f.twin;
  twin.python = o.python;
  twin.threads = o.threads;
  twin.blas_omp = blas_omp;
  twin.cuda = cuda;
  twin.bf16 = base.with_mixed_precision;
  twin.weight_decay = base.weight_decay;
  twin.grad_clip = base.grad_clip;
  twin.seed = base.seed;
  twin.embed_dropout_final_rate = base.embed_dropout_final_rate;
  const Inputs in =
      write_inputs(base, device, work, o.num_batches, std::max(o.warmup + o.steps + o.profiled, o.parity_steps), twin);

  f.load_start = loadavg();
  // The machine's float32 matrix-product rate on these threads, measured
  // before and after the runs (the best of the two is the reference); on a
  // GPU an 8192^3 product in the step's precision, and MFU against the
  // GPU's data-sheet peak (peak_flops.h).
  const std::string ref_device = cuda ? "cuda:" + std::to_string(std::max<int>(0, device.index())) : "cpu";
  const int ref_n = cuda ? 8192 : 1024;
  const bool ref_bf16 = cuda && base.with_mixed_precision;
  f.sgemm_label = cuda
                      ? "matmul (8192^3 " + std::string(ref_bf16 ? "bf16" : "float32") + ", GPU)"
                      : "sgemm (1024^3 float32, " + std::to_string(o.threads) + " thread(s), " + sgemm_provider() + ")";
  if (cuda)
    f.peak = peak_flops(base.peak_tflops, ref_device, cuda_device_name(std::max<int>(0, device.index())),
                        base.with_mixed_precision);
  f.sgemm = {measured_matmul_flops(ref_device, ref_n, 5, ref_bf16)};
  std::printf("vs_pytorch: %s, load average %s\n", today().c_str(), f.load_start.c_str());
  std::printf(
      "vs_pytorch: config %s, %lld parameters, %d thread(s) (BLAS %s, %d thread(s); C++'s float32 products: "
      "%s, the twin's: its BLAS), batch %d, %d dumps, "
      "%d round(s) x (%d warm-up + %d timed + %d profiled) steps per mode\n",
      join_files(o.sources.files, false).c_str(), (long long)in.parameters, o.threads, blas_kind(), blas_threads(),
      sgemm_provider().c_str(), base.batch_size_per_gpu, o.num_batches, o.rounds, o.warmup, o.steps, o.profiled);
  std::printf(
      "vs_pytorch: C++ keeps %s of freed memory for the next step (cpu_keep_freed_mib, as wgtrain); the twin "
      "runs with PyTorch's defaults\n",
      keeps_freed ? (std::to_string(base.cpu_keep_freed_mib) + " MiB").c_str() : "none (the C library refused)");
  std::fflush(stdout);

  f.parity = nullptr;
  if (o.parity_steps > 0 && run_cpp_side && run_twin_side)
    f.parity = loss_parity(base, device, in, twin, work, o.parity_steps, ref_bf16);

  // ---- the rounds: C++ all modes, then the twin all modes
  std::vector<ModeResult> results = mode_results(modes, plans);
  std::string twin_modes;
  for (size_t i = 0; i < modes.size(); ++i)
    if (modes[i].configured)
      std::printf("config: the configured plan, %s\n", plans[i].summary().c_str());
    else
      twin_modes += (twin_modes.empty() ? "" : ",") + std::string(modes[i].name);
  for (int r = 1; r <= o.rounds; ++r) {
    if (run_cpp_side)
      add_cpp_round(results, run_cpp(base, device, modes, in.batches, in.weights, o.warmup, o.steps, o.profiled, true),
                    r);
    if (run_twin_side) {
      const std::string tj = (work / ("twin_round" + std::to_string(r) + ".json")).string();
      const std::string log = (work / ("twin_round" + std::to_string(r) + ".log")).string();
      add_twin_round(results,
                     run_twin(twin_command(twin, twin_modes, o.warmup, o.steps, o.profiled, true, tj, log), log, tj), r,
                     f.twin_facts);
    }
  }

  // ---- what else was asked for: the phases, the activation peaks, a trace, the pieces
  if (o.breakdown && run_cpp_side)
    for (ModeResult& r : results)
      r.cpp_phases = cpp_phases(base, device, r.mode, in.batches, in.weights, o.warmup, o.steps * o.rounds);
  f.activation_peaks = run_cpp_side && !o.no_activation_peaks && o.profiled > 0;
  if (f.activation_peaks) {
    std::vector<BuiltBatch> profiled_batches;  // those of the step peak: steps W+N … W+N+P-1
    for (int k = o.warmup + o.steps; k < o.warmup + o.steps + std::min<int>(o.profiled, int(in.batches.size())); ++k)
      profiled_batches.push_back(in.batches[size_t(k) % in.batches.size()]);
    for (ModeResult& r : results)
      r.activation = cpp_activation_peak(base, device, r.mode, profiled_batches, in.weights, o.warmup);
  }
  if (!o.trace.empty() && run_cpp_side)  // the first mode; the CPU (no trace on CUDA)
    write_trace(base, modes[0], in.batches, in.weights, o.trace);
  f.sgemm.push_back(measured_matmul_flops(ref_device, ref_n, 5, ref_bf16));
  if (o.pieces && run_cpp_side) print_pieces(base, in.weights, *std::max_element(f.sgemm.begin(), f.sgemm.end()));

  // ---- report
  f.config_files = o.sources.files;
  f.overrides = o.sources.overrides;
  f.parameters = in.parameters;
  f.batch_size = base.batch_size_per_gpu;
  f.keep_freed_mib = keeps_freed ? base.cpu_keep_freed_mib : 0;
  f.device = ref_device;
  f.side = o.side;
  f.breakdown = o.breakdown;
  f.load_end = loadavg();
  f.rounds = o.rounds;
  f.warmup = o.warmup;
  f.steps = o.steps;
  f.profiled = o.profiled;
  f.num_batches = o.num_batches;
  f.dump_losses = in.dump_losses;
  f.out = o.out;
  f.work_dir = work.string();
  f.plot = !o.no_plot;
  report(results, f);
  return 0;
}
