// Values the trainer produces each step, and the sinks that consume them
// (terminal log line, JSON lines file). No LibTorch: sinks are plain.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

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
  int64_t skipped_samples = 0;  // samples replaced so far because their data was unreadable (cumulative)
  double samples_per_second = 0;
  double tokens_per_second = 0;
  int64_t peak_bytes = 0;        // allocator peak during the step
  int64_t activation_bytes = 0;  // held at the end of forward
  bool skipped = false;          // non-finite loss, step skipped (nan_policy: skip)
  int oom_retries = 0;           // attempts repeated after running out of memory
  double validation_loss = -1;   // after this step (the end of a mini-epoch): the validation loss; < 0: none
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
  int64_t planned_peak_bytes = 0;   // gradient_checkpointing.policy auto: the prediction (0: manual)
  double planned_added_seconds = 0; // ... and its predicted recompute time per step
  double last_validation_loss = -1; // < 0: no validation ran
};

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void on_step(const StepMetrics& m) = 0;
  virtual void on_end(const RunSummary& s) = 0;
};

// Progress line every `every` steps (and on the last), summary at the end.
class LogSink : public MetricsSink {
 public:
  explicit LogSink(int every) : every_(every) {}
  void on_step(const StepMetrics& m) override;
  void on_end(const RunSummary& s) override;

 private:
  int every_;
};

// One JSON object per line every `every` steps; summary.json at the end.
class JsonlSink : public MetricsSink {
 public:
  JsonlSink(const std::string& run_dir, int every);
  void on_step(const StepMetrics& m) override;
  void on_end(const RunSummary& s) override;

 private:
  std::string run_dir_;
  int every_;
  std::ofstream out_;
};

std::string to_json(const StepMetrics& m);
std::string to_json(const RunSummary& s);

}  // namespace wg
