// Time windows of a run (wg-data.md §3.2): upstream's TimeWindowHandler
// (window idx = [t_start + idx·step, + len), n_win = floor((t_end − t_start)
// / step)) and the anemoi dataset indices of a window
// (get_dataset_indexes_timestep, ε = 1 ms).
//
// Invariants:
// - All times are int64 seconds since 1970-01-01 UTC; windows are half-open.
// - count() and window() depend only on the four numbers given: the same
//   window index means the same time span for every stream of a run.
// - dataset_indexes() never returns an index whose date lies outside the
//   window: upstream's §12.16 case (a misaligned window whose formula adds a
//   date ≥ its end, where upstream asserts) drops that date instead.
// No LibTorch.
#pragma once

#include <cstdint>
#include <vector>

namespace wg {

struct TimeWindow {
  int64_t start = 0;  // first second of the window
  int64_t end = 0;    // one past the last second
};

class TimeWindowHandler {
 public:
  // Throws std::invalid_argument (naming start_date, end_date, len_hrs,
  // step_hrs) unless len > 0, step > 0 and t_end ≥ t_start.
  TimeWindowHandler(int64_t t_start, int64_t t_end, int64_t len_seconds, int64_t step_seconds);
  // From the config's hours.
  static TimeWindowHandler from_hours(int64_t t_start, int64_t t_end, int len_hrs, int step_hrs);

  int64_t t_start() const { return t_start_; }
  int64_t t_end() const { return t_end_; }
  int64_t length() const { return len_; }
  int64_t step() const { return step_; }
  // n_win = floor((t_end − t_start) / step).
  int64_t count() const { return (t_end_ - t_start_) / step_; }
  // [t_start + idx·step, t_start + idx·step + len) for any idx (also past count()).
  TimeWindow window(int64_t idx) const { return {t_start_ + idx * step_, t_start_ + idx * step_ + len_}; }

 private:
  int64_t t_start_, t_end_, len_, step_;
};

// §3.2: the indices (into the dates data_start, data_start + period, …) a
// window reads; empty when the window is not inside [data_start, data_end]
// or, misaligned, contains no date. period > 0.
std::vector<int64_t> dataset_indexes(const TimeWindow& window, int64_t data_start, int64_t data_end, int64_t period);

}  // namespace wg
