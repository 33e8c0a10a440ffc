// Upstream's TimeWindowHandler and get_dataset_indexes_timestep (see header).
#include "wg/data/time_windows.h"

#include <stdexcept>
#include <string>

namespace wg {

TimeWindowHandler::TimeWindowHandler(int64_t t_start, int64_t t_end, int64_t len_seconds, int64_t step_seconds)
    : t_start_(t_start), t_end_(t_end), len_(len_seconds), step_(step_seconds) {
  if (len_ <= 0) throw std::invalid_argument("len_hrs must be > 0 (got " + std::to_string(len_) + " s)");
  if (step_ <= 0) throw std::invalid_argument("step_hrs must be > 0 (got " + std::to_string(step_) + " s)");
  if (t_end_ < t_start_)
    throw std::invalid_argument("end_date (" + std::to_string(t_end_) + " s) lies before start_date (" +
                                std::to_string(t_start_) + " s)");
}

TimeWindowHandler TimeWindowHandler::from_hours(int64_t t_start, int64_t t_end, int len_hrs, int step_hrs) {
  return TimeWindowHandler(t_start, t_end, int64_t(len_hrs) * 3600, int64_t(step_hrs) * 3600);
}

std::vector<int64_t> dataset_indexes(const TimeWindow& w, int64_t data_start, int64_t data_end, int64_t period) {
  std::vector<int64_t> out;
  if (period <= 0 || w.end <= w.start) return out;
  if (w.start < data_start || w.end > data_end) return out;
  // Milliseconds, so that ε = 1 ms is exact; every operand is ≥ 0, so C++
  // division is Python's floor division.
  const int64_t eps = 1;
  const int64_t p = period * 1000;
  const int64_t s = (w.start - data_start) * 1000;
  const int64_t e = (w.end - data_start) * 1000 - eps;
  int64_t d0 = s / p;
  int64_t d1 = e / p;
  if (s % p > 0) {
    if (d0 == d1) return out;
    d0 += 1;
  }
  d1 = d0 + ((w.end - w.start) * 1000 - eps) / p;
  for (int64_t d = d0; d <= d1; ++d) {
    const int64_t t = data_start + d * period;
    if (t >= w.start && t < w.end && t <= data_end) out.push_back(d);  // §12.16: never a date past the window
  }
  return out;
}

}  // namespace wg
