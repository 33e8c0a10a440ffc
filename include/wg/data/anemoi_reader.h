// `type: anemoi` streams as PointSets (wg-data.md §3.1–3.3): an
// anemoi-datasets Zarr v2 store (anemoi-zarr.md) read by upstream's
// DataReaderAnemoi rules, one window at a time.
//
// Invariants:
// - Channels (§3.1.3): a variable is selectable iff it has an entry in
//   `variables_metadata` (every variable when the store has no such
//   attribute), is not computed_forcing / constant_in_time and is not listed
//   in `constant_fields`; source and target keep, independently, the
//   selectable variables the stream's include/exclude substring rules keep,
//   in ascending store index.
// - Time (§3.1.2, §3.2): the store is cut to the run's period [t_start,
//   t_end] (first date ≥ t_start … last date ≤ t_end, every k-th date with a
//   `frequency` key); a window reads dataset_indexes(window, data_start,
//   data_end, period); outside the data it is empty (upstream spoofs it).
// - A window (§3.1.4): member 0; points time-major, then grid order;
//   lat = f32(2·clip(lat, −90, 90) − lat), lon = f32(((lon + 180) mod 360)
//   − 180); cells with a NaN coordinate are left out; data normalised in
//   float64, stored float32, NaN data stays NaN; no geoinfos.
// - A window touching a date of `missing_dates`, or whose chunk cannot be
//   decoded, throws UnreadableWindow; bad stores and configs ReaderError.
// Thread-safe: read() may run on several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wg/data/stream_reader.h"
#include "wg/data/time_windows.h"

namespace wg {

class AnemoiReader final : public StreamReader {
 public:
  // Opens `path` and reads its metadata, statistics, dates and coordinates
  // (never `data`). `windows` gives the period (t_start, t_end);
  // frequency_seconds is the stream's `frequency` key (0: the store's).
  AnemoiReader(const std::string& stream, const std::string& path, const ChannelRules& rules,
               const TimeWindowHandler& windows, int64_t frequency_seconds = 0);
  ~AnemoiReader() override;

  int64_t data_start() const;                        // first date of the period's data (seconds)
  int64_t data_end() const;                          // last date
  int64_t store_first_date() const;                  // the store's own first and last dates (seconds)
  int64_t store_last_date() const;
  int64_t period() const;                            // seconds between the dates read
  int64_t num_grid_points() const;                   // cells of the store, NaN coordinates included
  const std::vector<int64_t>& source_index() const;  // store variable index per source channel
  const std::vector<int64_t>& target_index() const;  // ... per target channel
  // The store dates `window` reads (seconds), in time order; empty outside the data.
  std::vector<int64_t> window_dates(const TimeWindow& window) const;

  void read(const TimeWindow& window, PointSet* source, PointSet* target) const override;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace wg
