// anemoi stream source: samples of an anemoi-datasets Zarr v2 store (ERA5
// and other reanalyses), read by WeatherGenerator's rules.
//
// - Channels: the store's `variables` in data order, kept by the stream's
//   substring rules (source / source_exclude, target / target_exclude) minus
//   the variables flagged computed_forcing or constant_in_time. A channel
//   can be a source only, a target only, or both.
// - Normalisation: (x - mean[i]) / stdev[i] with the store's float64
//   statistics. NaN sources become 0; NaN targets are left out of the loss.
// - Time: window k of the configured period covers
//   [start_date + k*step_hrs, + len_hrs) and starts by end_date; its dates
//   must all be in the store and none in missing_dates, else the window is
//   not available.
// - Space: cells with NaN coordinates are dropped; latitudes are reflected
//   into [-90, 90], longitudes wrapped to [-180, 180). A token holds
//   token_size consecutive cells (store order) of one date, so a sample has
//   (len_hrs / frequency) * ceil(cells / token_size) tokens; the last token
//   of a date is padded (padding is 0 and not a target).
//
// Thread-safe: samples may be read from several loader threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "wg/config/config.h"

namespace wg {

// Unusable data: a missing store or variable, a corrupt chunk, a window
// outside the data. The message names the stream, store, array, chunk or date.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The windows of a period: window k covers [start + k*step, + length) and
// starts no later than `end`; its dates may run past `end` (as in
// WeatherGenerator) when the store has them.
struct TimeWindows {
  int64_t start = 0;  // seconds since the epoch
  int64_t end = 0;    // the latest window start
  int64_t step = 0;   // seconds between window starts
  int64_t length = 0; // seconds covered by a window
  // Candidate windows (a store may lack some: see AnemoiStream::has_window).
  int64_t count() const { return end < start ? 0 : (end - start) / step + 1; }
  static TimeWindows training(const Config& config);
  static TimeWindows validation(const Config& config);
};

// The store of a stream: `filenames[0]`, absolute or under data_path.
std::string anemoi_store_path(const StreamConfig& stream, const std::string& data_path);

class AnemoiStream {
 public:
  // Opens the store and reads its metadata, statistics, dates and
  // coordinates (never `data`). Throws DataError.
  AnemoiStream(const StreamConfig& stream, const Config& config);
  ~AnemoiStream();
  AnemoiStream(AnemoiStream&&) noexcept;

  const std::string& store() const;
  const std::vector<std::string>& channels() const;  // sources and targets, store order
  const std::vector<uint8_t>& is_source() const;     // per channel
  int tokens() const;                                // per sample
  int token_size() const;
  int num_channels() const { return int(channels().size()); }

  // True if the window starting at `start` (seconds since the epoch; it
  // covers len_hrs) has all its dates in the store and none in missing_dates.
  bool has_window(int64_t start) const;
  // Throws DataError if the windows of `windows` need dates before the
  // store's first or after its last, naming the date; `what` names the
  // period in the message.
  void check_period(const TimeWindows& windows, const std::string& what) const;

  // Appends the window starting at `start`: tokens()*token_size()*channels() normalised values
  // ([T, token_size, C], NaN -> 0), the matching target validity (1 = a
  // finite value of a target channel) and tokens()*kCentroidFeatures
  // centroids. Throws DataError (a corrupt chunk, a date mismatch) and then
  // appends nothing.
  void sample(int64_t start, std::vector<float>& values, std::vector<uint8_t>& valid,
              std::vector<float>& centroids) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace wg
