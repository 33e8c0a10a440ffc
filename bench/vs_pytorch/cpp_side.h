// bench_vs_pytorch's C++ side: the recomputation modes it compares, and
// each measurement it makes of the trainer (timed steps, the phases of a
// step, the activation peak, what each piece keeps, a chrome trace). Every
// measurement starts from a fresh Trainer with the step dumps' weights.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "wg/config/config.h"
#include "wg/plan/recompute_plan.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/trainer.h"

namespace wg::bench::vs {

using json = nlohmann::json;
using Weights = std::vector<std::pair<std::string, torch::Tensor>>;  // parameter name, value

struct Mode {
  const char* name;  // as reported, and the twin's --modes item
  RecomputeMode mode;
  int every_n;
  bool configured = false;  // the plan the configuration gives (mode unused); C++ only
};

// none, full, selective, every_n=2: the modes both sides run.
const std::vector<Mode>& all_modes();
// `--modes config`: the configuration's own plan (gradient_checkpointing
// from the --config files and --set, node rules aside), such as `selective`
// with some pieces recomputed whole. The twin has no such plan: C++ only.
const Mode& config_mode();

// The configuration a mode trains with: `base` with every section in the
// mode, or `base` as it is for the configured plan.
Config mode_config(const Config& base, const Mode& mode);
// Whether a mode is `none` itself (the reference of the cost ratios).
bool is_none(const Mode& mode);
// The recomputed pieces of a plan, as key strings, sorted.
std::vector<std::string> recomputed_keys(const RecomputePlan& plan);

// How the C++ step peak and activation peak are measured (for the JSON).
extern const char* const kCppMemoryMethod;
extern const char* const kCppActivationPeakMethod;

// A fresh trainer in `mode` with the dumps' weights, the random generator
// seeded as the config says: every run of a mode starts alike.
std::unique_ptr<Trainer> mode_trainer(const Config& base, const Mode& mode, const torch::Device& device,
                                      const Weights& weights);

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
                            const std::vector<BuiltBatch>& batches, const Weights& weights, int warmup, int steps,
                            int profiled, bool dropout);

// The phases of Trainer::step_on, timed apart (forward + loss, backward,
// clipping with AdamW: one fused pass in FusedAdamW::clip_and_step): their
// medians over `steps` steps after `warmup`.
json cpp_phases(const Config& base, const torch::Device& device, const Mode& mode,
                const std::vector<BuiltBatch>& batches, const Weights& weights, int warmup, int steps);

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
                                   const std::vector<BuiltBatch>& batches, const Weights& weights, int warmup);

// Per piece: its forward time with nothing recomputed (the planner's cost
// profile: median of 3 probes of the planning batch) against its forward
// FLOPs, so its rate against the sgemm rate; and what it keeps for
// backward with nothing recomputed and under selective (lean). Then per
// section. Printed; on the CPU.
void print_pieces(const Config& base, const Weights& weights, double sgemm_rate);

// A chrome trace (LibTorch's profiler) of 5 steps of `mode` on the CPU, after
// 3 to warm up.
void write_trace(const Config& base, const Mode& mode, const std::vector<BuiltBatch>& batches, const Weights& weights,
                 const std::string& path);

}  // namespace wg::bench::vs
