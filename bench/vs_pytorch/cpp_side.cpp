// bench_vs_pytorch's C++ side (see cpp_side.h).
#include "cpp_side.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>

#include "../bench_common.h"
#include "text.h"
#include "wg/data/dataset.h"
#include "wg/model/flops.h"
#include "wg/model/model_batch.h"
#include "wg/plan/cost_profile.h"
#include "wg/util/generator_state.h"
#include "wg/util/memory.h"
#include "wg/util/units.h"

namespace wg::bench::vs {
namespace {

using Clock = std::chrono::steady_clock;

// Copies `from` into the trainer's parameters (by name).
void load_params(Trainer& t, const Weights& from) {
  torch::NoGradGuard no_grad;
  auto named = t.model()->named_parameters();
  for (const auto& [name, value] : from) named[name].copy_(value);
}

// The device's queued work done (CUDA), so that a clock reading counts it.
void wait_for(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

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

}  // namespace

const char* const kCppMemoryMethod =
    "counting CPU allocator (install_counting_allocator: every CPU tensor allocation through c10's allocator, not "
    "oneDNN/BLAS scratch mallocs): StepMetrics peak_bytes minus start_bytes (held when the step's compute began, "
    "its input tensors made and the last step's gradients set to none: activations and the gradients backward "
    "makes), max over P untimed steps after the timed ones (the batches the twin profiles) and "
    "over all rounds; cpp_step_peak_bytes_max_timed_steps: the same over every timed step";
const char* const kCppActivationPeakMethod =
    "the same counting allocator, in a separate run per mode after W ordinary steps: on each batch of the P "
    "profiled steps (those of cpp_step_peak_bytes), "
    "every parameter's gradient set to zeros first (backward adds into them in place), then forward, loss and "
    "backward; the peak above what was held when the forward began, max over the batches: activations and "
    "backward's temporaries, without the gradients a step from none allocates as it goes; "
    "cpp_activation_forward_end_bytes: on that batch, what was held above the same start once the loss was made, "
    "before backward (the forward's kept tensors and the loss's)";

const std::vector<Mode>& all_modes() {
  static const std::vector<Mode> modes = {{"none", RecomputeMode::None, 1},
                                          {"full", RecomputeMode::Full, 1},
                                          {"selective", RecomputeMode::Selective, 1},
                                          {"every_n=2", RecomputeMode::EveryN, 2}};
  return modes;
}

const Mode& config_mode() {
  static const Mode mode = {"config", RecomputeMode::None, 1, true};
  return mode;
}

Config mode_config(const Config& base, const Mode& mode) {
  return mode.configured ? base : bench::with_mode(base, mode.mode, mode.every_n);
}

bool is_none(const Mode& mode) { return !mode.configured && mode.mode == RecomputeMode::None; }

std::vector<std::string> recomputed_keys(const RecomputePlan& plan) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan.recomputed(i)) keys.push_back(plan.pieces()[i].str());
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::unique_ptr<Trainer> mode_trainer(const Config& base, const Mode& mode, const torch::Device& device,
                                      const Weights& weights) {
  const Config c = mode_config(base, mode);
  auto t = std::make_unique<Trainer>(c, Dataset(c, 0, 1), resolve_plan(c), device);
  load_params(*t, weights);
  torch::manual_seed(c.seed);
  return t;
}

std::vector<CppRun> run_cpp(const Config& base, const torch::Device& device, const std::vector<Mode>& modes,
                            const std::vector<BuiltBatch>& batches, const Weights& weights, int warmup, int steps,
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

json cpp_phases(const Config& base, const torch::Device& device, const Mode& mode,
                const std::vector<BuiltBatch>& batches, const Weights& weights, int warmup, int steps) {
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

ActivationPeak cpp_activation_peak(const Config& base, const torch::Device& device, const Mode& mode,
                                   const std::vector<BuiltBatch>& batches, const Weights& weights, int warmup) {
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

void print_pieces(const Config& base, const Weights& weights, double sgemm_rate) {
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
  std::printf(
      "\nforward per piece (sgemm %.1f GFLOP/s; kept: held after its forward, output included):\n"
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

void write_trace(const Config& base, const Mode& mode, const std::vector<BuiltBatch>& batches, const Weights& weights,
                 const std::string& path) {
  const std::unique_ptr<Trainer> trainer = mode_trainer(base, mode, torch::kCPU, weights);
  Trainer& t = *trainer;
  for (int k = 0; k < 3; ++k) t.step_on(batches[size_t(k) % batches.size()], k);
  {
    const torch::autograd::profiler::RecordProfile profile(path);
    for (int k = 3; k < 8; ++k) t.step_on(batches[size_t(k) % batches.size()], k);
  }
  std::cout << "wrote " << path << " (chrome trace of 5 C++ steps, mode " << mode.name << ")\n";
}

}  // namespace wg::bench::vs
