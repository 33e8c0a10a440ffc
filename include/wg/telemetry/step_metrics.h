// Values the trainer produces each step and at the end of a run, and the
// interface of what consumes them (log line, JSON lines, the rank-0
// coordinator). No LibTorch: sinks are plain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wg {

struct StepMetrics {
  int64_t step = 0;            // 0-based
  int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_seconds = 0;     // whole step, data included
  double compute_seconds = 0;  // forward, backward, exchange, optimizer: without making the input tensors
  int64_t start_bytes = 0;     // held when the compute began (weights, optimizer state, the input)
  double data_seconds = 0;     // waiting for the batch (data/loader: 0 when prefetched in time)
  // Waiting for the other ranks: the gradient exchange's wait after backward
  // and the step's agreements (out of memory, no data, non-finite). The
  // slowest rank waits least: step_seconds - sync_wait_seconds is the rank's
  // own work, the same on every rank of a balanced job.
  double sync_wait_seconds = 0;
  int64_t skipped_samples = 0;  // samples replaced so far because their data was unreadable (cumulative)
  double samples_per_second = 0;
  double tokens_per_second = 0;
  double model_flops = 0;           // the step's model FLOPs: forward, backward and recomputation (wg/model/flops.h)
  double peak_flops = 0;            // the rank's peak FLOP/s for MFU (0: unknown)
  int64_t peak_bytes = 0;           // allocated peak during the step
  int64_t peak_reserved_bytes = 0;  // what the allocator held at most (CUDA: the caching allocator's reserve)
  int64_t activation_bytes = 0;     // held at the end of forward
  bool nonfinite_loss = false;      // this rank's loss was NaN or infinite
  bool nonfinite_grad = false;      // the loss was finite and the gradients' norm (grad_norm) was not
  bool skipped = false;             // no optimizer step on any rank: no target data, (nan_policy: skip) a
                                    // non-finite loss on some rank or a non-finite gradient, or a gradient
                                    // overflow under loss scaling
  int oom_retries = 0;              // attempts repeated after running out of memory
  double loss_scale = 1;            // what the loss was multiplied by before backward (1: no loss scaling)
  double validation_loss = -1;      // after this step (the end of a mini-epoch): the validation loss; < 0: none
  // Per stream, in config order (names in StepLossNames): the stream's loss
  // (its first loss function, mean over channels; NaN: no data this step),
  // and per (stream, loss function) the per-channel losses as upstream logs
  // them (NaN: no data).
  std::vector<double> stream_losses;
  std::vector<std::vector<double>> channel_losses;
};

// The names the per-stream and per-channel losses of StepMetrics go by;
// fixed for a run.
// The step's model FLOP/s over its whole time, and that as a share of the peak (0 when unknown).
inline double model_flops_per_second(const StepMetrics& m) {
  return m.step_seconds > 0 ? m.model_flops / m.step_seconds : 0.0;
}
inline double mfu(const StepMetrics& m) { return m.peak_flops > 0 ? model_flops_per_second(m) / m.peak_flops : 0.0; }

struct StepLossNames {
  std::vector<std::string> streams;                 // [S]
  std::vector<std::string> channel_loss_keys;       // [S * loss functions]: "<stream>.<fct>"
  std::vector<std::vector<std::string>> channels;   // [S * loss functions]: the target channels
};

struct RunSummary {
  int64_t steps = 0;        // steps this process ran
  int64_t next_step = 0;    // where a resumed run would continue
  bool stopped_early = false;
  int64_t skipped_steps = 0;
  double seconds = 0;
  double first_loss = 0;  // first logged loss
  double last_loss = 0;   // last logged loss
  double mean_samples_per_second = 0;
  int64_t peak_bytes = 0;
  int64_t steady_peak_bytes = 0;    // the largest step peak after the first step (optimizer state allocated)
  int64_t oom_retries = 0;
  double last_validation_loss = -1; // < 0: no validation ran
};

// What the automatic planner predicted for the run (zero: a manual plan).
struct PlanPrediction {
  int64_t peak_bytes = 0;
  double added_seconds = 0;  // time per step its lean and recomputed pieces add
};

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void on_step(const StepMetrics& m) = 0;
  virtual void on_end(const RunSummary& s) = 0;
};

}  // namespace wg
