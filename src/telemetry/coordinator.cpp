// Gathering rank windows to rank 0 (see header).
#include "wg/telemetry/coordinator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstring>

namespace wg {

Coordinator::Coordinator(const DistContext& dist, const std::string& device, int64_t capacity_bytes, int every,
                         std::function<const RecomputePlan&()> plan, OnWindows on_windows)
    : dist_(dist), every_(std::max(1, every)), plan_(std::move(plan)), on_windows_(std::move(on_windows)),
      gather_(dist, sizeof(RankWindow)) {
  window_.rank = dist.rank();
  window_.local_rank = dist.node().local_rank;
  window_.node_index = dist.node().node_index;
  window_.capacity_bytes = capacity_bytes;
  std::strncpy(window_.host, dist.node().hostname.c_str(), sizeof window_.host - 1);
  std::strncpy(window_.device, device.c_str(), sizeof window_.device - 1);
}

Coordinator::~Coordinator() = default;

void Coordinator::on_step(const StepMetrics& m) {
  // The previous window's gather, published as soon as every rank took
  // part (not one window later): the age of wgtrain_last_step_timestamp_seconds
  // stays within a window and a step.
  if (gather_.done()) complete_pending();
  window_.step = m.step + 1;
  window_.loss = m.loss;
  window_.lr = m.lr;
  if (m.validation_loss >= 0) window_.validation_loss = m.validation_loss;
  window_.nonfinite_total += m.nonfinite_loss ? 1 : 0;
  window_.skipped_total += m.skipped ? 1 : 0;
  window_.oom_retries_total += m.oom_retries;
  window_.skipped_samples_total = m.skipped_samples;  // already a total
  window_.peak_allocated_bytes = std::max(window_.peak_allocated_bytes, m.peak_bytes);
  window_.peak_reserved_bytes = std::max(window_.peak_reserved_bytes, m.peak_reserved_bytes);
  if (window_.num_durations < RankWindow::kMaxDurations) window_.durations[window_.num_durations++] = m.step_seconds;
  window_samples_ += m.samples_per_second * m.step_seconds;
  window_tokens_ += m.tokens_per_second * m.step_seconds;
  window_flops_ += m.model_flops;
  window_.peak_flops = m.peak_flops;
  window_seconds_ += m.step_seconds;
  window_data_ += m.data_seconds;
  window_sync_ += m.sync_wait_seconds;
  ++window_steps_;
  window_.num_streams = int32_t(std::min<size_t>(m.stream_losses.size(), RankWindow::kMaxStreams));
  for (int i = 0; i < window_.num_streams; ++i)
    if (std::isfinite(m.stream_losses[size_t(i)])) {
      stream_sum_[i] += m.stream_losses[size_t(i)];
      ++stream_count_[i];
    }
  window_.last_step_unix_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (window_.step % every_ == 0 || window_.step == m.total_steps) gather_window();
}

void Coordinator::gather_window() {
  complete_pending();  // the previous window's gather, when on_step has not published it yet
  window_.samples_per_second = window_seconds_ > 0 ? window_samples_ / window_seconds_ : 0;
  window_.tokens_per_second = window_seconds_ > 0 ? window_tokens_ / window_seconds_ : 0;
  window_.model_flops_per_second = window_seconds_ > 0 ? window_flops_ / window_seconds_ : 0;
  window_.data_wait_seconds = window_steps_ > 0 ? window_data_ / window_steps_ : 0;
  window_.data_wait_ratio = window_seconds_ > 0 ? window_data_ / window_seconds_ : 0;
  window_.sync_wait_seconds = window_steps_ > 0 ? window_sync_ / window_steps_ : 0;
  window_.busy_seconds = window_steps_ > 0 ? (window_seconds_ - window_sync_) / window_steps_ : 0;
  window_.window_seconds = window_seconds_;
  const RecomputePlan& plan = plan_();
  for (int i = 0; i < window_.num_streams; ++i)
    window_.stream_loss[i] = stream_count_[i] > 0 ? stream_sum_[i] / stream_count_[i]
                                                  : std::numeric_limits<double>::quiet_NaN();
  window_.num_pieces = int32_t(std::min<size_t>(plan.size(), RankWindow::kMaxPieces));
  for (int i = 0; i < window_.num_pieces; ++i) window_.recomputed[i] = plan.recomputed(size_t(i)) ? 1 : 0;
  gather_.start(&window_);
  // A new window starts; counters (totals) carry on.
  window_.num_durations = 0;
  window_.peak_allocated_bytes = window_.peak_reserved_bytes = 0;
  window_samples_ = window_tokens_ = window_seconds_ = window_data_ = window_flops_ = window_sync_ = 0;
  window_steps_ = 0;
  std::fill(std::begin(stream_sum_), std::end(stream_sum_), 0.0);
  std::fill(std::begin(stream_count_), std::end(stream_count_), 0);
}

void Coordinator::complete_pending() {
  if (!gather_.active()) return;
  const std::vector<unsigned char>& bytes = gather_.wait();
  if (dist_.rank() != 0 || !on_windows_) return;
  std::vector<RankWindow> windows(size_t(dist_.size()));
  std::memcpy(windows.data(), bytes.data(), windows.size() * sizeof(RankWindow));
  on_windows_(windows);
}

void Coordinator::on_end(const RunSummary&) {
  if (window_steps_ > 0) gather_window();
  complete_pending();
}

}  // namespace wg
