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
#include <spdlog/spdlog.h>

#include <limits>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "wg/config/loader.h"
#include "wg/config/recompute_sections.h"
#include "wg/data/dataset.h"
#include "wg/dist/devices.h"
#include "wg/model/flops.h"
#include "wg/model/model_batch.h"
#include "wg/plan/cost_profile.h"
#include "wg/plan/recompute_plan.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/lr_schedule.h"
#include "wg/train/step_dump.h"
#include "wg/train/trainer.h"
#include "wg/util/generator_state.h"
#include "wg/util/memory.h"
#include "wg/util/onednn_sgemm.h"
#include "wg/util/side_thread.h"
#include "wg/util/peak_flops.h"
#include "wg/util/threads.h"
#include "wg/util/units.h"

#include <torch/csrc/autograd/profiler_legacy.h>

using namespace wg;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

const char* kCppMemoryMethod =
    "counting CPU allocator (install_counting_allocator: every CPU tensor allocation through c10's allocator, not "
    "oneDNN/BLAS scratch mallocs): StepMetrics peak_bytes minus start_bytes (held when the step's compute began, "
    "its input tensors made and the last step's gradients set to none: activations and the gradients backward "
    "makes), max over P untimed steps after the timed ones (the batches the twin profiles) and "
    "over all rounds; cpp_step_peak_bytes_max_timed_steps: the same over every timed step";
const char* kCppActivationPeakMethod =
    "the same counting allocator, in a separate run per mode after W ordinary steps: on each batch of the P "
    "profiled steps (those of cpp_step_peak_bytes), "
    "every parameter's gradient set to zeros first (backward adds into them in place), then forward, loss and "
    "backward; the peak above what was held when the forward began, max over the batches: activations and "
    "backward's temporaries, without the gradients a step from none allocates as it goes; "
    "cpp_activation_forward_end_bytes: on that batch, what was held above the same start once the loss was made, "
    "before backward (the forward's kept tensors and the loss's)";

struct Mode {
  const char* name;  // as reported, and the twin's --modes item
  RecomputeMode mode;
  int every_n;
  bool configured = false;  // the plan the configuration gives (mode unused); C++ only
};

const Mode kAllModes[] = {{"none", RecomputeMode::None, 1},
                          {"full", RecomputeMode::Full, 1},
                          {"selective", RecomputeMode::Selective, 1},
                          {"every_n=2", RecomputeMode::EveryN, 2}};
// `--modes config`: the configuration's own plan (gradient_checkpointing
// from the --config files and --set, node rules aside), such as `selective`
// with some pieces recomputed whole. The twin has no such plan: C++ only.
const Mode kConfigMode = {"config", RecomputeMode::None, 1, true};

// The configuration a mode trains with: `base` with every section in the
// mode, or `base` as it is for the configured plan.
Config mode_config(const Config& base, const Mode& mode) {
  return mode.configured ? base : bench::with_mode(base, mode.mode, mode.every_n);
}

// Whether a mode is `none` itself (the reference of the cost ratios).
bool is_none(const Mode& mode) { return !mode.configured && mode.mode == RecomputeMode::None; }

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&t));
  return buf;
}

std::string join_doubles(const std::vector<double>& v) {
  std::ostringstream os;
  os.precision(17);
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

// The --config files in their order, "a.yml + b.yml" (their file names
// alone when `names`).
std::string join_files(const std::vector<std::string>& files, bool names) {
  std::string out;
  for (const auto& f : files) out += (out.empty() ? "" : " + ") + (names ? fs::path(f).filename().string() : f);
  return out;
}

// The recomputed pieces of a plan, as key strings.
std::vector<std::string> recomputed_keys(const RecomputePlan& plan) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan.recomputed(i)) keys.push_back(plan.pieces()[i].str());
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Copies `from` into the trainer's parameters (by name).
void load_params(Trainer& t, const std::vector<std::pair<std::string, torch::Tensor>>& from) {
  torch::NoGradGuard no_grad;
  auto named = t.model()->named_parameters();
  for (const auto& [name, value] : from) named[name].copy_(value);
}

// A fresh trainer in `mode` with the dumps' weights, the random generator
// seeded as the config says: every run of a mode starts alike.
std::unique_ptr<Trainer> mode_trainer(const Config& base, const Mode& mode, const torch::Device& device,
                                      const std::vector<std::pair<std::string, torch::Tensor>>& weights) {
  const Config c = mode_config(base, mode);
  auto t = std::make_unique<Trainer>(c, Dataset(c, 0, 1), resolve_plan(c), device);
  load_params(*t, weights);
  torch::manual_seed(c.seed);
  return t;
}

struct CppRun {
  std::vector<double> seconds, losses, flops;  // flops: the timed steps' model FLOPs
  int64_t peak_timed = 0, peak_extra = 0;
  int64_t reserved_peak =
      0;  // the allocator's reserved peak over the profiled steps (absolute; CUDA's caching allocator)
};

// The modes side by side, step by step in turn (so that the machine's
// drift, which on these shared machines reaches 2x within minutes, falls
// alike on every mode): per mode a fresh trainer with the initial weights
// and its own random generator state, seeded alike (the same dropout draws
// in every mode); W warm-up and N timed steps, then P more for the peak.
std::vector<CppRun> run_cpp(const Config& base, const torch::Device& device, const std::vector<Mode>& modes,
                            const std::vector<BuiltBatch>& batches,
                            const std::vector<std::pair<std::string, torch::Tensor>>& weights, int warmup, int steps,
                            int profiled, bool dropout) {
  std::vector<std::unique_ptr<Trainer>> trainers;
  std::vector<GeneratorStates> states;
  for (const Mode& mode : modes) {
    trainers.push_back(mode_trainer(base, mode, device, weights));
    if (!dropout) trainers.back()->model()->eval();  // no other train-only behaviour (latent noise is 0 here)
    states.push_back(GeneratorStates::capture(device));
  }
  std::vector<CppRun> runs(modes.size());
  const size_t K = batches.size();
  for (int k = 0; k < warmup + steps + profiled; ++k)
    for (size_t i = 0; i < modes.size(); ++i) {
      states[i].restore();
      const StepMetrics m = trainers[i]->step_on(batches[size_t(k) % K], k);
      states[i] = GeneratorStates::capture(device);
      CppRun& r = runs[i];
      r.losses.push_back(m.loss);
      const int64_t peak = m.peak_bytes - m.start_bytes;
      if (k < warmup) continue;
      if (k < warmup + steps) {
        r.seconds.push_back(m.compute_seconds);
        r.flops.push_back(m.model_flops);
        r.peak_timed = std::max(r.peak_timed, peak);
      } else {
        r.peak_extra = std::max(r.peak_extra, peak);
        r.reserved_peak = std::max(r.reserved_peak, m.peak_reserved_bytes);
      }
    }
  return runs;
}

// The device's queued work done (CUDA), so that a clock reading counts it.
void wait_for(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// The phases of Trainer::step_on, timed apart (forward + loss, backward,
// clipping with AdamW: one fused pass in FusedAdamW::clip_and_step).
json cpp_phases(const Config& base, const torch::Device& device, const Mode& mode,
                const std::vector<BuiltBatch>& batches,
                const std::vector<std::pair<std::string, torch::Tensor>>& weights, int warmup, int steps) {
  const std::unique_ptr<Trainer> trainer = mode_trainer(base, mode, device, weights);
  Trainer& t = *trainer;
  std::vector<double> f, b, o;
  const auto d = [](Clock::time_point x, Clock::time_point y) { return std::chrono::duration<double>(y - x).count(); };
  for (int k = 0; k < warmup + steps; ++k) {
    const ModelBatch input = to_model_batch(batches[size_t(k) % batches.size()], device);
    const auto t0 = Clock::now();
    t.optimizer().clear_gradients();
    torch::Tensor loss = t.training_loss(input);
    loss.item<double>();
    const auto t1 = Clock::now();
    loss.backward();
    loss = torch::Tensor();
    wait_for(device);
    const auto t2 = Clock::now();
    for (auto& group : t.optimizer().param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(t.schedule().at(k));
    t.optimizer().clip_and_step(base.grad_clip > 0 ? base.grad_clip : 1e30);
    wait_for(device);
    const auto t3 = Clock::now();
    if (k < warmup) continue;
    f.push_back(d(t0, t1)), b.push_back(d(t1, t2)), o.push_back(d(t2, t3));
  }
  return {{"forward_loss", median(f)}, {"backward", median(b)}, {"clip_optimizer", median(o)}};
}

// The activation peak of a mode: a step's forward and backward on each
// batch with every parameter's gradient already held (zeros, which
// backward adds into in place), so that its peak above its start counts
// the activations and backward's temporaries, and not the gradients that a
// step from none allocates as it goes (the step peak counts those). The
// highest over `batches` (the profiled steps' batches, as the step peak),
// after `warmup` ordinary steps; with what that batch held when its loss
// was made, before backward: the forward's kept tensors, the loss's
// included. Where the two are close, the peak is what forward keeps; where
// the peak is well above it, a backward's temporaries.
struct ActivationPeak {
  int64_t peak = -1, forward_end = -1;  // bytes above the step's start
};
ActivationPeak cpp_activation_peak(const Config& base, const torch::Device& device, const Mode& mode,
                                   const std::vector<BuiltBatch>& batches,
                                   const std::vector<std::pair<std::string, torch::Tensor>>& weights, int warmup) {
  const std::unique_ptr<Trainer> trainer = mode_trainer(base, mode, device, weights);
  Trainer& t = *trainer;
  for (int k = 0; k < warmup; ++k) t.step_on(batches[size_t(k) % batches.size()], k);
  const std::string dev = device.str();  // "cpu" or "cuda:N"
  ActivationPeak highest;
  for (const BuiltBatch& batch : batches) {
    t.optimizer().clear_gradients();
    for (auto& p : t.model()->parameters()) p.mutable_grad() = torch::zeros_like(p);
    const ModelBatch input = to_model_batch(batch, device);
    wait_for(device);
    const int64_t start = memory_snapshot(dev).current_bytes;
    reset_peak_memory(dev);
    torch::Tensor loss = t.training_loss(input);
    wait_for(device);
    const int64_t forward_end = memory_snapshot(dev).current_bytes - start;
    if (loss.defined()) loss.backward();
    loss = torch::Tensor();
    wait_for(device);
    const int64_t peak = memory_snapshot(dev).peak_bytes - start;
    if (peak > highest.peak) highest = {peak, forward_end};
  }
  t.optimizer().clear_gradients();
  return highest;
}

// Bytes each piece leaves held after its forward (what it keeps for
// backward, its output included), summed over its calls in one forward.
class KeptRecorder : public PieceObserver {
 public:
  explicit KeptRecorder(const PlanProbe& probe) : probe_(probe) {}
  void before(const PieceKey&) override { start_ = probe_.current_bytes(); }
  void after(const PieceKey& key, const PieceOutput&) override { kept[key.str()] += probe_.current_bytes() - start_; }
  std::map<std::string, int64_t> kept;

 private:
  const PlanProbe& probe_;
  int64_t start_ = 0;
};

// Per piece: its forward time with nothing recomputed (the planner's cost
// profile: median of 3 probes of the planning batch) against its forward
// FLOPs, so its rate against the sgemm rate; and what it keeps for
// backward with nothing recomputed and under selective (lean). Then per section.
void print_pieces(const Config& base, const std::vector<std::pair<std::string, torch::Tensor>>& weights,
                  double sgemm_rate) {
  const Config c = bench::with_mode(base, RecomputeMode::None, 1);
  Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), torch::kCPU);
  load_params(t, weights);
  TrainerProbe probe(t);
  const CostModel costs = profile_costs(probe, 3);
  const ModelFlops flops = t.flops_of(to_model_batch(probe.batch(), torch::kCPU));
  std::map<std::string, int64_t> kept[2];  // none, selective
  for (int k = 0; k < 2; ++k) {
    const RecomputePlan saved = probe.plan();
    probe.set_plan(resolve_plan(bench::with_mode(base, k == 0 ? RecomputeMode::None : RecomputeMode::Selective, 1)));
    KeptRecorder recorder(probe);
    probe.probe(&recorder);
    probe.set_plan(saved);
    kept[k] = recorder.kept;
  }
  std::map<std::string, double> piece_flops;
  for (const PieceFlops& p : flops.pieces) piece_flops[p.key.str()] += p.forward;
  struct Sum {
    double seconds = 0, flops = 0;
    int64_t kept_none = 0, kept_lean = 0;
  };
  std::map<std::string, Sum> sections;
  Sum total;
  const auto print = [&](const std::string& name, const Sum& v) {
    std::printf("%-36s %9.2f %9.3f %9.1f %5.0f%% %10.2f %10.2f\n", name.c_str(), v.seconds * 1e3, v.flops * 1e-9,
                v.flops / v.seconds * 1e-9, 100 * v.flops / v.seconds / sgemm_rate, v.kept_none / kMiB,
                v.kept_lean / kMiB);
  };
  std::printf("\nforward per piece (sgemm %.1f GFLOP/s; kept: held after its forward, output included):\n"
              "%-36s %9s %9s %9s %6s %10s %10s\n",
              sgemm_rate * 1e-9, "piece", "ms", "GFLOP", "GFLOP/s", "sgemm", "kept MiB", "selective");
  for (const PieceCost& pc : costs.pieces) {
    const std::string key = pc.key.str();
    const Sum v{pc.forward_seconds, piece_flops[key], kept[0][key], kept[1][key]};
    print(key, v);
    for (Sum* agg : {&sections[pc.key.section], &total}) {
      agg->seconds += v.seconds, agg->flops += v.flops;
      agg->kept_none += v.kept_none, agg->kept_lean += v.kept_lean;
    }
  }
  std::printf("%-36s %9s %9s %9s %6s %10s %10s\n", "section", "ms", "GFLOP", "GFLOP/s", "sgemm", "kept MiB",
              "selective");
  for (const auto& [name, v] : sections) print(name, v);
  print("all pieces", total);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The C++ trainer against its PyTorch twin (tests/reference/wg_*.py), per recomputation mode",
               "bench_vs_pytorch"};
  ConfigSources sources;
  bench::add_config_options(app, sources);
  int threads = 2, rounds = 3, warmup = 2, steps = 10, num_batches = 4, profiled = 2, parity_steps = 4;
  bool no_plot = false, breakdown = false, pieces = false, no_activation_peaks = false;
  std::string out = "bench/results/vs_pytorch.json", side = "both", trace, device_name = "cpu",
              python = "/usr/bin/python3";
  std::vector<std::string> mode_names;
  for (const Mode& m : kAllModes) mode_names.push_back(m.name);
  app.add_option("--threads", threads, "intra-op threads of both sides (BLAS: 1)")->capture_default_str();
  app.add_option("--rounds", rounds, "alternating rounds")->capture_default_str();
  app.add_option("--warmup", warmup, "warm-up steps per mode and round")->capture_default_str();
  app.add_option("--steps", steps, "timed steps per mode and round")->capture_default_str();
  app.add_option("--batches", num_batches, "K: step dumps (batches 0 … K-1) cycled through")->capture_default_str();
  app.add_option("--profiled-steps", profiled, "untimed steps per mode and round measured for the peak")
      ->capture_default_str();
  app.add_option("--parity-steps", parity_steps, "steps of the loss-parity run without dropout (0: none)")
      ->capture_default_str();
  app.add_option("--side", side, "run both sides, or only one (for profiling)")
      ->check(CLI::IsMember({"both", "cpp", "twin"}))
      ->capture_default_str();
  app.add_option("--modes", mode_names,
                 "modes to run (subset of none full selective every_n=2 config; config: the plan of the --config "
                 "files and --set, C++ only)")
      ->check(CLI::IsMember({"none", "full", "selective", "every_n=2", "config"}))
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--out", out, "JSON results")->capture_default_str();
  app.add_option("--device", device_name,
                 "cpu, or cuda (both sides on the GPU; the twin needs torch >= 2.0, and runs under bf16 autocast when "
                 "with_mixed_precision is set, as the C++ side does)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--python", python, "the twin's Python, with its torch")->capture_default_str();
  app.add_flag("--breakdown", breakdown, "also time the C++ step's phases per mode (a separate run)");
  app.add_flag("--no-activation-peaks", no_activation_peaks,
               "skip the run per C++ mode that measures its activation peak (the step's peak without the gradients)");
  app.add_flag("--pieces", pieces, "also print each piece's forward time, FLOP rate and kept memory (none, selective)");
  app.add_option("--trace", trace, "also write a chrome trace (LibTorch's profiler) of 5 C++ steps of the first mode");
  app.add_flag("--no-plot", no_plot, "skip the plot");
  bench::parse_or_exit(app, argc, argv);
  bench::default_config(sources);
  // Same thread environment as the twin's process: OpenMP reads it when it
  // loads, so the benchmark re-executes itself once with it set.
  const std::string omp = std::to_string(std::max(1, threads));
  // With the OpenMP OpenBLAS both sides' matrix products take the OpenMP
  // threads; any other BLAS is held to one thread on both sides.
  const bool blas_omp = std::string(blas_kind()) == "openblas-openmp";
  const char* have_omp = std::getenv("OMP_NUM_THREADS");
  const char* have_blas = std::getenv("OPENBLAS_NUM_THREADS");
  const bool blas_env_ok = blas_omp ? have_blas == nullptr : (have_blas && std::string(have_blas) == "1");
  if (!(have_omp && omp == have_omp && blas_env_ok)) {
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
  if (steps < 1 || rounds < 1 || num_batches < 1 || warmup < 0 || threads < 1 || profiled < 0 || parity_steps < 0) {
    std::cerr << "--steps, --rounds, --batches and --threads must be >= 1; --warmup, --profiled-steps and "
                 "--parity-steps >= 0\n";
    return 2;
  }
  const bool run_cpp_side = side != "twin", run_twin_side = side != "cpp";
  const torch::Device device(device_name == "cuda" ? "cuda:0" : device_name);  // one GPU: the first
  const bool cuda = device.is_cuda();
  if (cuda && !torch::cuda::is_available()) {
    std::cerr << "--device cuda: this LibTorch sees no CUDA device\n";
    return 2;
  }
  if (cuda && (pieces || !trace.empty())) {
    std::cerr << "--pieces and --trace measure the CPU step only; leave them out with --device cuda\n";
    return 2;
  }
  std::vector<Mode> kModes;
  for (const Mode& m : kAllModes)
    if (std::find(mode_names.begin(), mode_names.end(), m.name) != mode_names.end()) kModes.push_back(m);
  if (std::find(mode_names.begin(), mode_names.end(), kConfigMode.name) != mode_names.end())
    kModes.push_back(kConfigMode);
  if (run_twin_side && std::all_of(kModes.begin(), kModes.end(), [](const Mode& m) { return m.configured; })) {
    std::cerr << "--modes config runs on the C++ side only: add --side cpp, or a mode the twin has\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  install_counting_allocator();
  Config base;
  std::vector<RecomputePlan> plans;  // per mode, resolved before any work (the configured plan's pieces checked)
  try {
    base = load_config(sources);
    for (const Mode& m : kModes) plans.push_back(resolve_plan(mode_config(base, m)));
  } catch (const ConfigError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {  // the configured plan names a piece the model lacks
    std::cerr << "configuration: " << e.what() << "\n";
    return 2;
  }
  base.validate_with_ema = false;  // the twin keeps no weight average
  base.loader_num_workers = 0;     // step_on takes its batch; no loader threads
  const bool keeps_freed = bench::trainer_cpu_setup(base, threads);  // as wgtrain (the twin: PyTorch's defaults)

  // ---- shared inputs: K step dumps (weights, tables, batches), the per-step lr and β1
  const fs::path out_path(out);
  const fs::path out_dir = out_path.parent_path().empty() ? fs::path(".") : out_path.parent_path();
  const fs::path work = out_dir / (out_path.stem().string() + "_work");
  fs::create_directories(work);
  std::vector<BuiltBatch> batches;
  std::vector<std::string> dumps;
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  std::vector<double> lrs, beta1s, dump_losses;
  AdamConstants adam;
  int64_t parameters = 0;
  const int total_steps = warmup + steps + profiled;
  {
    const Config c = bench::with_mode(base, RecomputeMode::None, 1);
    Trainer t(c, Dataset(c, 0, 1), resolve_plan(c), device);
    for (int k = 0; k < num_batches; ++k) {
      batches.push_back(t.batch(k % t.total_steps()));
      const std::string path = (work / ("step" + std::to_string(k) + ".safetensors")).string();
      dump_losses.push_back(write_step_dump(path, t, c, batches.back(), k, /*float64=*/false));
      dumps.push_back(path);
    }
    for (const auto& p : t.model()->named_parameters()) weights.emplace_back(p.key(), p.value().detach().clone());
    for (int k = 0; k < std::max(total_steps, parity_steps); ++k) {
      lrs.push_back(t.schedule().at(k));
      beta1s.push_back(t.schedule().beta1_at(k));
    }
    adam = adam_constants(int64_t(c.batch_size_per_gpu));
    parameters = t.parameter_count();
  }
  const double embed_final = base.embed_dropout_final_rate;
  std::string dump_args;
  for (const std::string& d : dumps) dump_args += " " + quote(d);
  // The twin's command for `modes`, `w` + `n` timed steps, `p` profiled, dropout on or off.
  const auto twin_command = [&](const std::string& modes, int w, int n, int p, bool dropout, const std::string& json_out,
                                const std::string& log) {
    std::ostringstream os;
    os.precision(17);
    os << (blas_omp ? "" : "OPENBLAS_NUM_THREADS=1 ") << "OMP_NUM_THREADS=" << threads << " " << quote(python) << " "
       << quote(std::string(WG_SOURCE_DIR) + "/tests/reference/wg_twin.py") << " bench" << dump_args
       << (cuda ? std::string(" --device cuda") + (base.with_mixed_precision ? " --bf16" : "") : "") << " --modes "
       << modes << " --threads " << threads << " --warmup " << w << " --steps " << n << " --profiled-steps " << p
       << " --lr " << join_doubles(lrs) << " --beta1 " << join_doubles(beta1s) << " --beta2 " << adam.beta2 << " --eps "
       << adam.eps << " --weight-decay " << base.weight_decay << " --grad-clip " << base.grad_clip << " --seed "
       << base.seed << " --embed-dropout-final-rate " << embed_final << (dropout ? "" : " --no-dropout") << " --out "
       << quote(json_out) << " > " << quote(log) << " 2>&1";
    return os.str();
  };
  const auto run_twin = [&](const std::string& cmd, const std::string& log, const std::string& json_out) -> json {
    // From a thread off OpenMP's binding (side_thread.h): the twin's process
    // inherits its CPUs, not the one this thread is bound to.
    int status = 0;
    std::thread([&] {
      unbind_side_thread("twin launcher");
      status = std::system(cmd.c_str());
    }).join();
    if (status != 0) {
      std::ifstream f(log);
      std::cerr << "twin bench failed: " << cmd << "\n" << f.rdbuf() << "\n";
      std::exit(1);
    }
    return json::parse(std::ifstream(json_out));
  };

  const std::string load_start = loadavg();
  // The machine's float32 matrix-product rate on these threads, measured
  // before and after the runs (the best of the two is the reference); on a
  // GPU an 8192^3 product in the step's precision, and MFU against the
  // GPU's data-sheet peak (peak_flops.h).
  const std::string ref_device = cuda ? "cuda:" + std::to_string(std::max<int>(0, device.index())) : "cpu";
  const int ref_n = cuda ? 8192 : 1024;
  const bool ref_bf16 = cuda && base.with_mixed_precision;
  const std::string ref_label =
      cuda ? "matmul (8192^3 " + std::string(ref_bf16 ? "bf16" : "float32") + ", GPU)"
           : "sgemm (1024^3 float32, " + std::to_string(threads) + " thread(s), " + sgemm_provider() + ")";
  const PeakFlops peak = cuda
                             ? peak_flops(base.peak_tflops, ref_device,
                                          cuda_device_name(std::max<int>(0, device.index())), base.with_mixed_precision)
                             : PeakFlops{};
  std::vector<double> sgemm = {measured_matmul_flops(ref_device, ref_n, 5, ref_bf16)};
  std::printf("vs_pytorch: %s, load average %s\n", today().c_str(), load_start.c_str());
  std::printf(
      "vs_pytorch: config %s, %lld parameters, %d thread(s) (BLAS %s, %d thread(s); C++'s float32 products: "
      "%s, the twin's: its BLAS), batch %d, %d dumps, "
      "%d round(s) x (%d warm-up + %d timed + %d profiled) steps per mode\n",
      join_files(sources.files, false).c_str(), (long long)parameters, threads, blas_kind(), blas_threads(),
      sgemm_provider().c_str(), base.batch_size_per_gpu, num_batches, rounds, warmup, steps, profiled);
  std::printf("vs_pytorch: C++ keeps %s of freed memory for the next step (cpu_keep_freed_mib, as wgtrain); the twin "
              "runs with PyTorch's defaults\n",
              keeps_freed ? (std::to_string(base.cpu_keep_freed_mib) + " MiB").c_str() : "none (the C library refused)");
  std::fflush(stdout);

  // ---- loss parity without dropout (mode none): the two implementations must agree
  json parity = nullptr;
  if (parity_steps > 0 && run_cpp_side && run_twin_side) {
    const CppRun c = run_cpp(base, device, {kAllModes[0]}, batches, weights, 0, parity_steps, 0, false)[0];
    const std::string tj = (work / "twin_parity.json").string(), log = (work / "twin_parity.log").string();
    const json doc = run_twin(twin_command("none", 0, parity_steps, 0, false, tj, log), log, tj);
    const std::vector<double> tl = doc["modes"][0]["losses"].get<std::vector<double>>();
    double worst = 0;
    for (size_t k = 0; k < c.losses.size() && k < tl.size(); ++k)
      worst = std::max(worst, std::abs(c.losses[k] - tl[k]) / std::max(1e-30, std::abs(c.losses[k])));
    parity = {{"steps", parity_steps}, {"mode", "none"}, {"dropout", "off"}, {"cpp_losses", c.losses},
              {"torch_losses", tl}, {"max_relative_difference", worst}};
    std::printf(
        "loss parity (no dropout, %d steps): C++ %s\n                                     twin %s\n"
        "  max relative difference %.2e%s\n",
        parity_steps, join_doubles(c.losses).substr(0, 90).c_str(), join_doubles(tl).substr(0, 90).c_str(), worst,
        ref_bf16       ? "  (bf16 autocast: the two sides round differently)"
        : worst < 1e-3 ? ""
                       : "  <-- the two sides do not train the same model");
    std::fflush(stdout);
  }

  const size_t nm = kModes.size();
  std::vector<std::vector<double>> cpp_sec(nm), torch_sec(nm), cpp_flops(nm);
  std::vector<int64_t> cpp_peak(nm, 0), cpp_peak_timed(nm, 0), torch_peak(nm, 0);
  std::vector<int64_t> cpp_reserved(nm, 0), torch_reserved(nm, 0);  // absolute reserved peaks (CUDA)
  std::vector<std::vector<double>> cpp_losses(nm), torch_losses(nm);
  std::vector<std::vector<std::string>> cpp_keys(nm), torch_keys(nm);
  std::vector<int> pieces_recomputed(nm), pieces_total(nm), torch_pieces(nm), pieces_lean(nm);
  std::vector<json> torch_phases(nm);
  std::string torch_version, torch_memory_method, torch_time_method;
  std::string twin_modes;
  for (size_t i = 0; i < nm; ++i) {
    if (!kModes[i].configured) twin_modes += (twin_modes.empty() ? "" : ",") + std::string(kModes[i].name);
    const RecomputePlan& plan = plans[i];
    if (kModes[i].configured) std::printf("config: the configured plan, %s\n", plan.summary().c_str());
    pieces_recomputed[i] = plan.pieces_recomputed();
    pieces_total[i] = plan.pieces_total();
    pieces_lean[i] = plan.pieces_lean();
    cpp_keys[i] = recomputed_keys(plan);
  }

  for (int r = 1; r <= rounds; ++r) {
    if (run_cpp_side) {
      const std::vector<CppRun> all = run_cpp(base, device, kModes, batches, weights, warmup, steps, profiled, true);
      for (size_t i = 0; i < nm; ++i) {
        const CppRun& c = all[i];
        cpp_sec[i].insert(cpp_sec[i].end(), c.seconds.begin(), c.seconds.end());
        cpp_flops[i].insert(cpp_flops[i].end(), c.flops.begin(), c.flops.end());
        cpp_peak[i] = std::max(cpp_peak[i], c.peak_extra);
        cpp_peak_timed[i] = std::max(cpp_peak_timed[i], c.peak_timed);
        cpp_reserved[i] = std::max(cpp_reserved[i], c.reserved_peak);
        if (r == 1) cpp_losses[i] = c.losses;
        std::printf("  round %d C++  %-10s median %8.2f ms  peak %7.2f MiB\n", r, kModes[i].name,
                    median(c.seconds) * 1e3, c.peak_extra / kMiB);
        std::fflush(stdout);
      }
    }
    if (run_twin_side) {
      const std::string tj = (work / ("twin_round" + std::to_string(r) + ".json")).string();
      const std::string log = (work / ("twin_round" + std::to_string(r) + ".log")).string();
      const json doc = run_twin(twin_command(twin_modes, warmup, steps, profiled, true, tj, log), log, tj);
      torch_version = doc.value("torch_version", "");
      torch_memory_method = doc.value("step_peak_bytes_method", "");
      torch_time_method = doc.value("step_seconds_method", "");
      for (const auto& m : doc["modes"])
        for (size_t i = 0; i < nm; ++i) {
          if (m["mode"].get<std::string>() != kModes[i].name) continue;
          const auto sec = m["step_seconds"].get<std::vector<double>>();
          torch_sec[i].insert(torch_sec[i].end(), sec.begin(), sec.end());
          torch_peak[i] = std::max(torch_peak[i], m["step_peak_bytes"].get<int64_t>());
          if (m.contains("peak_reserved_bytes") && !m["peak_reserved_bytes"].is_null())
            torch_reserved[i] = std::max(torch_reserved[i], m["peak_reserved_bytes"].get<int64_t>());
          torch_pieces[i] = m["pieces_recomputed"].get<int>();
          torch_keys[i] = m["recomputed_pieces"].get<std::vector<std::string>>();
          if (m.contains("phase_seconds_median")) torch_phases[i] = m["phase_seconds_median"];
          if (r == 1) torch_losses[i] = m["losses"].get<std::vector<double>>();
          std::printf("  round %d twin %-10s median %8.2f ms  peak %7.2f MiB\n", r, kModes[i].name,
                      median(sec) * 1e3, m["step_peak_bytes"].get<int64_t>() / kMiB);
        }
      std::fflush(stdout);
    }
  }

  std::vector<json> cpp_phase(nm);
  if (breakdown && run_cpp_side)
    for (size_t i = 0; i < nm; ++i)
      cpp_phase[i] = cpp_phases(base, device, kModes[i], batches, weights, warmup, steps * rounds);
  std::vector<ActivationPeak> cpp_act(nm);  // each mode's activation peak (gradients held from the start)
  const bool act_peaks = run_cpp_side && !no_activation_peaks && profiled > 0;
  if (act_peaks) {
    std::vector<BuiltBatch> profiled_batches;  // those of the step peak: steps W+N … W+N+P-1
    for (int k = warmup + steps; k < warmup + steps + std::min<int>(profiled, int(batches.size())); ++k)
      profiled_batches.push_back(batches[size_t(k) % batches.size()]);
    for (size_t i = 0; i < nm; ++i)
      cpp_act[i] = cpp_activation_peak(base, device, kModes[i], profiled_batches, weights, warmup);
  }
  if (!trace.empty() && run_cpp_side) {  // the first mode: 3 steps to warm up, then 5 traced
    const Mode& m = kModes[0];
    const std::unique_ptr<Trainer> trainer = mode_trainer(base, m, device, weights);  // the CPU: no trace on CUDA
    Trainer& t = *trainer;
    for (int k = 0; k < 3; ++k) t.step_on(batches[size_t(k) % batches.size()], k);
    {
      const torch::autograd::profiler::RecordProfile profile(trace);
      for (int k = 3; k < 8; ++k) t.step_on(batches[size_t(k) % batches.size()], k);
    }
    std::cout << "wrote " << trace << " (chrome trace of 5 C++ steps, mode " << m.name << ")\n";
  }

  // ---- report
  sgemm.push_back(measured_matmul_flops(ref_device, ref_n, 5, ref_bf16));
  const double sgemm_rate = *std::max_element(sgemm.begin(), sgemm.end());
  if (pieces && run_cpp_side) print_pieces(base, weights, sgemm_rate);
  std::printf("\n%-10s %7s %9s %9s %9s %9s %9s %9s %9s %9s %8s %6s\n", "mode", "pieces", "C++ ms", "twin ms", "C++ st/s",
              "twin st/s", "C++ MiB", "twin MiB", "speed-up", "peak C/T", "GFLOP/s", "sgemm");
  json modes = json::array();
  bool all_fast = true, all_small = true, plans_match = true;
  bool fast_none = true, fast_others = true, fast_sgemm = true;
  std::vector<double> cpp_rate(nm, 0);
  for (size_t i = 0; i < nm; ++i) {
    const double tc = median(cpp_sec[i]), tt = median(torch_sec[i]);
    double flop_sum = 0, sec_sum = 0;
    for (size_t k = 0; k < cpp_flops[i].size(); ++k) flop_sum += cpp_flops[i][k], sec_sum += cpp_sec[i][k];
    cpp_rate[i] = sec_sum > 0 ? flop_sum / sec_sum : 0;  // the model FLOPs of all timed steps / their time
    const bool both = run_cpp_side && run_twin_side && !kModes[i].configured;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double speedup = both ? tt / tc : nan,
                 peak_ratio = both ? double(cpp_peak[i]) / double(std::max<int64_t>(torch_peak[i], 1)) : nan;
    if (both) {
      all_fast = all_fast && speedup >= 1.15;
      (kModes[i].mode == RecomputeMode::None ? fast_none : fast_others) &=
          speedup >= (kModes[i].mode == RecomputeMode::None ? 1.5 : 1.3);
      all_small = all_small && cpp_peak[i] <= torch_peak[i];
      if (pieces_lean[i] == 0) plans_match = plans_match && cpp_keys[i] == torch_keys[i];
    }
    char pieces[32];
    std::snprintf(pieces, sizeof pieces, "%d/%d", pieces_recomputed[i], pieces_total[i]);
    if (!kModes[i].configured) fast_sgemm = fast_sgemm && cpp_rate[i] >= 0.6 * sgemm_rate;  // the modes
    std::string note;
    if (kModes[i].configured)
      note = "  (C++ only: the configured plan, " + std::to_string(pieces_lean[i]) + " pieces lean)";
    else if (pieces_lean[i] > 0)  // selective: lean here, whole attention pieces in the twin (its checkpoint API)
      note = "  (C++: " + std::to_string(pieces_lean[i]) + " pieces lean; the twin recomputes " +
             std::to_string(torch_pieces[i]) + " pieces whole)";
    else if (both && cpp_keys[i] != torch_keys[i])
      note = "  (the twin recomputes other pieces!)";
    std::printf("%-10s %7s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %8.3fx %9.3f %8.1f %5.0f%%%s\n", kModes[i].name, pieces,
                tc * 1e3, tt * 1e3, 1 / tc, 1 / tt, cpp_peak[i] / kMiB, torch_peak[i] / kMiB, speedup, peak_ratio,
                cpp_rate[i] * 1e-9, 100 * cpp_rate[i] / sgemm_rate, note.c_str());
    double loss_diff_3 = 0;  // the first 3 steps, with dropout (the sides draw different masks)
    for (size_t k = 0; k < 3 && k < cpp_losses[i].size() && k < torch_losses[i].size(); ++k)
      loss_diff_3 = std::max(loss_diff_3, std::abs(cpp_losses[i][k] - torch_losses[i][k]) / std::abs(cpp_losses[i][k]));
    json m = {{"mode", kModes[i].name},
              {"pieces_recomputed", pieces_recomputed[i]},
              {"pieces_total", pieces_total[i]},
              {"pieces_lean", pieces_lean[i]},
              {"torch_pieces_recomputed", torch_pieces[i]},
              {"recomputed_pieces_match", cpp_keys[i] == torch_keys[i]},
              {"cpp_step_seconds_median", run_cpp_side ? json(tc) : json(nullptr)},
              {"cpp_steps_per_second", run_cpp_side ? json(1 / tc) : json(nullptr)},
              {"cpp_step_peak_bytes", run_cpp_side ? json(cpp_peak[i]) : json(nullptr)},
              {"cpp_step_peak_bytes_max_timed_steps", cpp_peak_timed[i]},
              {"cpp_activation_peak_bytes", act_peaks ? json(cpp_act[i].peak) : json(nullptr)},
              {"cpp_activation_forward_end_bytes", act_peaks ? json(cpp_act[i].forward_end) : json(nullptr)},
              {"cpp_step_seconds", cpp_sec[i]},
              {"cpp_model_flops_per_step_median", median(cpp_flops[i])},
              {"cpp_model_flops_per_second", cpp_rate[i]},
              {"cpp_share_of_sgemm_rate", cpp_rate[i] / sgemm_rate},
              {"cpp_losses_round1", cpp_losses[i]},
              {"cpp_phase_seconds_median", cpp_phase[i]},
              {"torch_step_seconds_median", run_twin_side ? json(tt) : json(nullptr)},
              {"torch_steps_per_second", run_twin_side ? json(1 / tt) : json(nullptr)},
              {"torch_step_peak_bytes", run_twin_side ? json(torch_peak[i]) : json(nullptr)},
              {"torch_step_seconds", torch_sec[i]},
              {"torch_losses_round1", torch_losses[i]},
              {"torch_phase_seconds_median", torch_phases[i]},
              {"loss_max_relative_difference_first3", loss_diff_3},
              {"speedup_cpp_over_torch", both ? json(speedup) : json(nullptr)},
              {"peak_ratio_cpp_over_torch", both ? json(peak_ratio) : json(nullptr)}};
    if (cuda) {
      m["cpp_peak_reserved_bytes"] = cpp_reserved[i];
      m["torch_peak_reserved_bytes"] = torch_reserved[i];
      m["cpp_mfu"] = cpp_rate[i] / peak.flops;
    }
    modes.push_back(m);
  }
  if (cuda) {  // reserved memory and MFU; the model FLOPs of `none` (no recomputation) put both sides alike
    double none_flops = std::nan("");
    for (size_t i = 0; i < nm; ++i)
      if (is_none(kModes[i])) none_flops = median(cpp_flops[i]);
    std::printf("\n%-10s %13s %13s %9s %14s %14s   (peak %.1f TFLOP/s: %s)\n", "mode", "C++ res GiB", "twin res GiB",
                "C++ MFU", "C++ MFU/none", "twin MFU/none", peak.flops * 1e-12, peak.source.c_str());
    for (size_t i = 0; i < nm; ++i) {
      const double tc = median(cpp_sec[i]), tt = median(torch_sec[i]);
      const double mfu_c = none_flops / tc / peak.flops, mfu_t = none_flops / tt / peak.flops;
      std::printf("%-10s %13.2f %13.2f %8.1f%% %13.1f%% %13.1f%%\n", kModes[i].name, cpp_reserved[i] / kGiB,
                  torch_reserved[i] / kGiB, 100 * cpp_rate[i] / peak.flops, 100 * mfu_c, 100 * mfu_t);
      modes[i]["cpp_mfu_model_flops_of_none"] = mfu_c;
      modes[i]["torch_mfu_model_flops_of_none"] = mfu_t;
    }
  }
  // The cost of recomputation on the C++ side: each mode's step time and peak against none's.
  json cost = json::object();
  if (run_cpp_side && is_none(kModes[0])) {
    const double t_none = median(cpp_sec[0]);
    std::string line;
    for (size_t i = 1; i < nm; ++i) {
      const double time_ratio = median(cpp_sec[i]) / t_none;
      const double peak_cut = 1.0 - double(cpp_peak[i]) / double(std::max<int64_t>(cpp_peak[0], 1));
      const double act_cut = 1.0 - double(cpp_act[i].peak) / double(std::max<int64_t>(cpp_act[0].peak, 1));
      cost[kModes[i].name] = {{"step_time_over_none", time_ratio},
                              {"peak_cut_from_none", profiled > 0 ? json(peak_cut) : json(nullptr)},
                              {"activation_peak_cut_from_none", act_peaks ? json(act_cut) : json(nullptr)}};
      char part[192];
      std::snprintf(part, sizeof part, "%s%s %.3fx the time", line.empty() ? "" : "; ", kModes[i].name, time_ratio);
      line += part;
      if (profiled > 0) {  // no profiled steps: no peaks
        std::snprintf(part, sizeof part, ", %.1f %% less peak", 100 * peak_cut);
        line += part;
      }
      if (act_peaks) {
        std::snprintf(part, sizeof part, ", %.1f %% less activation peak", 100 * act_cut);
        line += part;
      }
    }
    std::printf("C++ against its own none: %s (targets: full <= 1.3x; selective <= 1.1x cutting >= 50 %%)\n",
                line.c_str());
  }
  if (act_peaks) {
    std::printf("C++ activation peaks, MiB (held at the end of forward):");
    for (size_t i = 0; i < nm; ++i)
      std::printf("%s %s %.2f (%.2f)", i > 0 ? ";" : "", kModes[i].name, double(cpp_act[i].peak) / kMiB,
                  double(cpp_act[i].forward_end) / kMiB);
    std::printf("\n");
  }
  const std::string load_end = loadavg();
  std::printf("load average at the start %s, at the end %s\n", load_start.c_str(), load_end.c_str());
  std::printf("%s: %.1f GFLOP/s before the runs, %.1f after\n", ref_label.c_str(), sgemm[0] * 1e-9, sgemm[1] * 1e-9);
  if (run_cpp_side && run_twin_side)
    std::printf("targets: C++ >= 1.5x the twin's steps/s in none: %s; >= 1.3x in the other modes: %s; C++ peak <= the "
                "twin's in every mode: %s; model FLOP/s >= 60%% of sgemm in every mode: %s%s\n",
                fast_none ? "met" : "NOT met", fast_others ? "met" : "NOT met", all_small ? "met" : "NOT met",
                fast_sgemm ? "met" : "NOT met", plans_match ? "" : "; the two sides' recomputed pieces differ");
  if (breakdown && run_cpp_side) {
    std::printf("C++ phases (median ms): mode       forward+loss backward    clip   AdamW clip+AdamW\n");
    for (size_t i = 0; i < nm; ++i)
      std::printf("                        %-10s %10.2f %8.2f %7s %7s %10.2f  (one fused pass)\n", kModes[i].name,
                  cpp_phase[i]["forward_loss"].get<double>() * 1e3, cpp_phase[i]["backward"].get<double>() * 1e3,
                  "", "", cpp_phase[i]["clip_optimizer"].get<double>() * 1e3);
  }
  if (run_twin_side && !torch_phases[0].is_null()) {
    std::printf("twin phases (median ms): mode      forward+loss backward    clip   AdamW clip+AdamW\n");
    for (size_t i = 0; i < nm; ++i)
      if (!torch_phases[i].is_null()) {
        const double clip = torch_phases[i]["clip"].get<double>(), opt = torch_phases[i]["optimizer"].get<double>();
        std::printf("                        %-10s %10.2f %8.2f %7.2f %7.2f %10.2f\n", kModes[i].name,
                    torch_phases[i]["forward_loss"].get<double>() * 1e3,
                    torch_phases[i]["backward"].get<double>() * 1e3, clip * 1e3, opt * 1e3, (clip + opt) * 1e3);
      }
  }

  const std::string cfg_name = join_files(sources.files, true);
  json doc = {
      {"title", "C++ (LibTorch) vs PyTorch twin, " + cfg_name + ", " + std::to_string(threads) + " thread(s), batch " +
                    std::to_string(base.batch_size_per_gpu) + ", " + today()},
      {"benchmark", "vs_pytorch"},
      {"date", today()},
      {"config", join_files(sources.files, false)},
      {"overrides", sources.overrides},
      {"parameters", parameters},
      {"threads", threads},
      {"blas", blas_kind()},
      {"cpp_sgemm", sgemm_provider()},
      {"cpp_keep_freed_mib", keeps_freed ? base.cpu_keep_freed_mib : 0},
      {"blas_threads", blas_threads()},
      {"thread_environment",
       "both processes run with OMP_NUM_THREADS=" + std::to_string(threads) +
           (blas_omp ? " (the OpenMP OpenBLAS takes these threads on both sides)" : " and OPENBLAS_NUM_THREADS=1") +
           "; intra-op threads set by set_compute_threads (C++) and torch.set_num_threads (twin)"},
      {"device", ref_device},
      {"sgemm_flops_per_second", sgemm},
      {"sgemm_method", ref_label},
      {"peak_flops", cuda ? json(peak.flops) : json(nullptr)},
      {"peak_flops_source", peak.source},
      {"model_flops_method",
       "wg/model/flops.h: matrix products of forward, backward (2x forward) and recomputation, "
       "counted from the batch shapes; the rate is the timed steps' FLOPs over their "
       "compute_seconds"},
      {"side", side},
      {"loadavg_start", load_start},
      {"loadavg_end", load_end},
      {"rounds", rounds},
      {"warmup", warmup},
      {"steps", steps},
      {"profiled_steps", profiled},
      {"num_batches", num_batches},
      {"dumps", dumps},
      {"dump_losses", dump_losses},
      {"batch_size_per_gpu", base.batch_size_per_gpu},
      {"torch_version", torch_version},
      {"optimizer",
       {{"lr_per_step", lrs},
        {"beta1_per_step", beta1s},
        {"beta2", adam.beta2},
        {"eps", adam.eps},
        {"weight_decay", base.weight_decay},
        {"grad_clip", base.grad_clip},
        {"note",
         "both sides: AdamW with step k's lr and beta1 from the C++ LrSchedule (upstream's), clipping over "
         "all parameters; the C++ weight average (validate_with_ema) is off"}}},
      {"dropout", "as configured on both sides (the prediction engine's fixed 0.1, embed_dropout_final_rate " +
                      std::to_string(embed_final) +
                      "); the two sides draw different masks, so their losses "
                      "agree only roughly; loss_parity compares them without dropout"},
      {"loss_parity", parity},
      {"step_seconds_method",
       "median over all timed steps of all rounds; rounds alternate C++ (all modes, step by step in turn) then the "
       "twin (all modes); "
       "C++: StepMetrics::compute_seconds of Trainer::step_on (gradients set to none, forward, loss, backward, "
       "clip, AdamW; the input tensors are made before it starts); twin: " +
           torch_time_method},
      {"cpp_step_peak_bytes_method", kCppMemoryMethod},
      {"cpp_activation_peak_bytes_method", kCppActivationPeakMethod},
      {"torch_step_peak_bytes_method", torch_memory_method},
      {"target",
       {{"speedup_min_none", 1.5},
        {"speedup_none_met", fast_none},
        {"speedup_min_other_modes", 1.3},
        {"speedup_other_modes_met", fast_others},
        {"speedup_1_15_every_mode_met", all_fast},
        {"peak_not_above_torch_met", all_small},
        {"model_flops_share_of_sgemm_min", 0.6},
        {"model_flops_share_met", fast_sgemm},
        {"recomputed_pieces_match", plans_match}}},
      {"modes", modes},
      {"cpp_cost_against_none", cost}};
  fs::create_directories(out_dir);
  std::ofstream(out) << doc.dump(2) << "\n";
  std::printf("wrote %s (dumps and twin outputs in %s)\n", out.c_str(), work.string().c_str());
  if (!no_plot && run_cpp_side && run_twin_side) {
    const std::string png = (out_dir / (out_path.stem().string() + ".png")).string();
    const std::string cmd = "/usr/bin/python3 " + quote(std::string(WG_SOURCE_DIR) + "/bench/plot_vs_pytorch.py") +
                            " --in " + quote(out) + " --out " + quote(png);
    if (std::system(cmd.c_str()) != 0) std::cerr << "plot failed: " << cmd << "\n";
  }
  return 0;
}
