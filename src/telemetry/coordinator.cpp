// Gathering rank windows to rank 0 (see header).
#include "wg/telemetry/coordinator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "wg/dist/check.h"

namespace wg {

struct Coordinator::Pending {
  RankWindow sent;                  // must stay alive until the gather completes
  std::vector<RankWindow> received; // rank 0 only
  MPI_Request request = MPI_REQUEST_NULL;
  bool active = false;
};

Coordinator::Coordinator(const DistContext& dist, const std::string& device, int64_t capacity_bytes, int every,
                         std::function<const CheckpointPlan&()> plan, OnWindows on_windows)
    : dist_(dist), every_(std::max(1, every)), plan_(std::move(plan)), on_windows_(std::move(on_windows)),
      pending_(std::make_unique<Pending>()) {
  window_.rank = dist.rank();
  window_.local_rank = dist.node().local_rank;
  window_.node_index = dist.node().node_index;
  window_.capacity_bytes = capacity_bytes;
  std::strncpy(window_.host, dist.node().hostname.c_str(), sizeof window_.host - 1);
  std::strncpy(window_.device, device.c_str(), sizeof window_.device - 1);
}

Coordinator::~Coordinator() {
  // A gather still in flight at destruction (an exception unwound past
  // on_end) cannot be completed without the other ranks: leave it to MPI_Abort.
}

void Coordinator::on_step(const StepMetrics& m) {
  window_.step = m.step + 1;
  window_.loss = m.loss;
  window_.lr = m.lr;
  if (m.validation_loss >= 0) window_.validation_loss = m.validation_loss;
  window_.nonfinite_total += m.skipped ? 1 : 0;
  window_.skipped_total += m.skipped ? 1 : 0;
  window_.oom_retries_total += m.oom_retries;
  window_.skipped_samples_total = m.skipped_samples;  // already a total
  window_.peak_allocated_bytes = std::max(window_.peak_allocated_bytes, m.peak_bytes);
  window_.peak_reserved_bytes = std::max(window_.peak_reserved_bytes, m.peak_bytes);
  if (window_.num_durations < RankWindow::kMaxDurations) window_.durations[window_.num_durations++] = m.step_seconds;
  window_samples_ += m.samples_per_second * m.step_seconds;
  window_tokens_ += m.tokens_per_second * m.step_seconds;
  window_seconds_ += m.step_seconds;
  window_data_ += m.data_seconds;
  ++window_steps_;
  window_.last_step_unix_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (window_.step % every_ == 0 || window_.step == m.total_steps) gather_window();
}

void Coordinator::gather_window() {
  complete_pending();  // the previous window's gather, long done by now
  window_.samples_per_second = window_seconds_ > 0 ? window_samples_ / window_seconds_ : 0;
  window_.tokens_per_second = window_seconds_ > 0 ? window_tokens_ / window_seconds_ : 0;
  window_.data_wait_seconds = window_steps_ > 0 ? window_data_ / window_steps_ : 0;
  window_.data_wait_ratio = window_seconds_ > 0 ? window_data_ / window_seconds_ : 0;
  const CheckpointPlan& plan = plan_();
  const auto keys = plan.keys();
  window_.num_pieces = int32_t(std::min<size_t>(keys.size(), RankWindow::kMaxPieces));
  for (int i = 0; i < window_.num_pieces; ++i) window_.recomputed[i] = plan.get(keys[size_t(i)]) ? 1 : 0;

  Pending& p = *pending_;
  p.sent = window_;
  if (dist_.rank() == 0) p.received.assign(size_t(dist_.size()), RankWindow{});
  WG_MPI_CHECK(MPI_Igather(&p.sent, sizeof(RankWindow), MPI_BYTE, dist_.rank() == 0 ? p.received.data() : nullptr,
                           sizeof(RankWindow), MPI_BYTE, 0, MPI_COMM_WORLD, &p.request));
  p.active = true;
  // A new window starts; counters (totals) carry on.
  window_.num_durations = 0;
  window_.peak_allocated_bytes = window_.peak_reserved_bytes = 0;
  window_samples_ = window_tokens_ = window_seconds_ = window_data_ = 0;
  window_steps_ = 0;
}

void Coordinator::complete_pending() {
  Pending& p = *pending_;
  if (!p.active) return;
  wait_politely(&p.request);
  p.active = false;
  if (dist_.rank() == 0 && on_windows_) on_windows_(p.received);
}

void Coordinator::on_end(const RunSummary&) {
  if (window_steps_ > 0) gather_window();
  complete_pending();
}

}  // namespace wg
