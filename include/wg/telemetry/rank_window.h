// What each rank reports to rank 0 every train_log_freq.metrics steps: one
// fixed-size record, so the whole job's report is one MPI gather of bytes.
// Counters are totals since the start; the rest describes the last window.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

struct RankWindow {
  static constexpr int kMaxDurations = 256;  // step durations of the window (more: the last ones)
  static constexpr int kMaxPieces = 512;     // checkpoint plan pieces, in plan-key order
  static constexpr int kMaxStreams = 32;     // per-stream losses, in config order

  int32_t rank = 0;
  int32_t local_rank = 0;
  int32_t node_index = 0;
  int32_t num_durations = 0;
  int32_t num_pieces = 0;
  int32_t num_streams = 0;
  int64_t step = 0;  // steps finished by the rank
  int64_t nonfinite_total = 0;
  int64_t skipped_total = 0;
  int64_t oom_retries_total = 0;
  int64_t skipped_samples_total = 0;  // samples replaced because their data was unreadable
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t capacity_bytes = 0;
  int64_t planned_peak_bytes = 0;
  double loss = 0;
  double lr = 0;
  double validation_loss = -1;   // the latest validation loss (the same on every rank); < 0: none yet
  double samples_per_second = 0;
  double tokens_per_second = 0;
  double model_flops_per_second = 0;  // the window's model FLOPs / its step time
  double peak_flops = 0;              // the rank's peak FLOP/s (0: unknown)
  double data_wait_seconds = 0;  // mean per step in the window
  double data_wait_ratio = 0;    // share of the window's step time spent waiting for data
  double sync_wait_seconds = 0;  // mean per step waiting for the other ranks (StepMetrics::sync_wait_seconds)
  double busy_seconds = 0;       // mean step time less sync_wait_seconds: the rank's own work
  double window_seconds = 0;     // the window's step time, all its steps
  double last_step_unix_seconds = 0;
  double durations[kMaxDurations] = {};
  double stream_loss[kMaxStreams] = {};  // mean over the window's steps with data; NaN: none
  uint8_t recomputed[kMaxPieces] = {};
  char host[64] = {};
  char device[16] = {};

  std::string hostname() const { return std::string(host, strnlen_(host, sizeof host)); }
  std::string device_name() const { return std::string(device, strnlen_(device, sizeof device)); }

 private:
  static size_t strnlen_(const char* s, size_t n) {
    size_t i = 0;
    while (i < n && s[i]) ++i;
    return i;
  }
};

}  // namespace wg
