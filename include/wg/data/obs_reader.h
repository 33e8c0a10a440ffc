// `type: obs` streams as PointSets (wg-data.md §9): a plain Zarr v2 store
// with a row table of observations, read window by window.
//
// Store layout: `data` (n_rows, n_cols) float table, rows time-sorted, its
// attributes `colnames` (must contain `lat` and `lon`), `means` and `vars`
// (per column); `dates` (n_rows[, k]) datetime64[s], column 0 used; the hourly
// index `idx_{YYYYMMDDHHMM}_1` (YYYYMMDDHHMM = the stream's base_datetime):
// entry h = the first row at or after base + h hours.
//
// Invariants:
// - Channels: the columns whose name contains `obsvalue`, kept by the
//   stream's include/exclude substring rules (excludes apply also when
//   includes are given: upstream's precedence bug §12.15 fixed), in column
//   order. Geoinfos: the columns strictly between `lon` and the first
//   `obsvalue` column (G may be 0, errata 2), normalised with their column
//   statistics.
// - A window holds exactly the rows with window.start ≤ date < window.end,
//   in row order: the hourly index only locates them (one row of slack on
//   each side, then the dates decide), so upstream's lost rows (§12.15: the
//   starts[idx − 1] off-by-one and the exclusive `ends − 1`) do not occur.
// - Rows with a NaN lat or lon are left out; data and geoinfos are
//   normalised in float64 and stored float32; NaN data stays NaN.
// - A window without observations gives empty PointSets (the sample builder
//   spoofs them, §3.4), never an error.
// Thread-safe: read() may run on several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wg/data/stream_reader.h"

namespace wg {

class ObsReader final : public StreamReader {
 public:
  // Opens `path`, reads the column names, statistics and the hourly index.
  // base_datetime: the stream key (seconds; default 1970-01-01T00:00).
  ObsReader(const std::string& stream, const std::string& path, const ChannelRules& rules, int64_t base_datetime = 0);
  ~ObsReader() override;

  int64_t num_rows() const;
  const std::vector<std::string>& colnames() const;
  const std::string& index_array() const;              // e.g. "idx_197001010000_1"
  const std::vector<int64_t>& source_columns() const;  // column index per source channel
  const std::vector<int64_t>& target_columns() const;
  const std::vector<int64_t>& geoinfo_columns() const;
  // Rows [first, second) that the hourly index locates for `window`
  // (widened by one row each side, clamped to the table).
  std::pair<int64_t, int64_t> row_range(const TimeWindow& window) const;
  // The rows of `window` (date inside it), ascending; NaN-coordinate rows included.
  std::vector<int64_t> window_rows(const TimeWindow& window) const;

  void read(const TimeWindow& window, PointSet* source, PointSet* target) const override;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace wg
