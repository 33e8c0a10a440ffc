// The rank-0 coordinator's gathering side. Runs on every rank as a metrics
// sink: it folds each step into the rank's current window, and every
// train_log_freq.metrics steps gathers every rank's window to rank 0 with
// one non-blocking gather (the dist context's AsyncGather), completed at
// the next window (or at the end), so the step does not wait for it. Rank 0
// hands the gathered windows to a callback (the Prometheus side,
// telemetry/job_telemetry).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wg/dist/context.h"
#include "wg/plan/recompute_plan.h"
#include "wg/telemetry/rank_window.h"
#include "wg/telemetry/step_metrics.h"

namespace wg {

class Coordinator : public MetricsSink {
 public:
  using OnWindows = std::function<void(const std::vector<RankWindow>&)>;
  // `plan` returns the rank's current plan (it may change after an
  // out-of-memory retry); `capacity_bytes` is the device's memory.
  Coordinator(const DistContext& dist, const std::string& device, int64_t capacity_bytes, int every,
              std::function<const RecomputePlan&()> plan, OnWindows on_windows);
  ~Coordinator() override;

  void set_planned_peak(int64_t bytes) { window_.planned_peak_bytes = bytes; }
  void on_step(const StepMetrics& m) override;
  void on_end(const RunSummary& s) override;  // completes the last gather (blocking)

 private:
  void gather_window();
  void complete_pending();

  const DistContext& dist_;
  int every_;
  std::function<const RecomputePlan&()> plan_;
  OnWindows on_windows_;
  RankWindow window_;
  double window_samples_ = 0, window_tokens_ = 0, window_seconds_ = 0, window_data_ = 0, window_flops_ = 0,
         window_sync_ = 0;
  int window_steps_ = 0;
  double stream_sum_[RankWindow::kMaxStreams] = {};  // per-stream losses of the window (finite ones)
  int stream_count_[RankWindow::kMaxStreams] = {};
  AsyncGather gather_;
};

}  // namespace wg
