// The one interface every stream type (anemoi, obs, synthetic) implements:
// the points of a time window as PointSets (wg-data.md §3.3: NaN
// coordinates removed, data and geoinfos normalised), the channel names and
// the raw statistics used for spoofing (§3.4); plus the reader errors and
// the helpers the readers share (channel rules, normalisation, appending).
//
// Invariants:
// - A reader is immutable once constructed; read() is const and safe to call
//   from several loader threads at once.
// - source/target PointSets of one read() have num_channels =
//   source_channels().size() / target_channels().size() and num_geoinfos =
//   num_geoinfos(), also when empty (an empty window is not an error).
// - Every error names the stream, the file and the key (array, attribute,
//   column or config key) at fault. UnreadableWindow marks a window that
//   cannot be read (a missing date, a corrupt chunk): the sample builder
//   skips it; any other ReaderError is bad input or a bad config.
// No LibTorch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "wg/data/pipeline_error.h"
#include "wg/data/points.h"
#include "wg/data/stream_sample.h"
#include "wg/data/time_windows.h"

namespace wg {

class ReaderError : public PipelineError {
 public:
  // what(): "stream 'S', FILE KEY: message".
  ReaderError(const std::string& stream, const std::string& file, const std::string& key, const std::string& message)
      : PipelineError(stream, file + " " + key, message), file_(file), field_(key) {}
  const std::string& file() const { return file_; }
  const std::string& field() const { return field_; }  // the array / attribute / column / config key

 private:
  std::string file_;
  std::string field_;
};

class UnreadableWindow : public ReaderError {
 public:
  using ReaderError::ReaderError;
};

// The stream keys source / source_exclude / target / target_exclude
// (an include list absent: every channel; empty: none).
struct ChannelRules {
  std::optional<std::vector<std::string>> source;
  std::vector<std::string> source_exclude;
  std::optional<std::vector<std::string>> target;
  std::vector<std::string> target_exclude;
};

// Names and raw (un-normalised) statistics of a reader's channels, fixed
// after opening. Data order = the order of the PointSet columns.
struct ReaderChannels {
  std::vector<std::string> source;    // [n_src]
  std::vector<std::string> target;    // [n_tgt]
  std::vector<double> source_mean;    // [n_src]
  std::vector<double> source_stdev;   // [n_src]
  std::vector<double> target_mean;    // [n_tgt]
  std::vector<double> target_stdev;   // [n_tgt]
  std::vector<std::string> geoinfos;  // [G] names
  std::vector<double> geoinfo_mean;   // [G]
  std::vector<double> geoinfo_stdev;  // [G]
};

class StreamReader {
 public:
  virtual ~StreamReader() = default;
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  const std::string& stream() const { return stream_; }
  const std::string& file() const { return file_; }
  const ReaderChannels& channels() const { return channels_; }
  const std::vector<std::string>& source_channels() const { return channels_.source; }
  const std::vector<std::string>& target_channels() const { return channels_.target; }
  int num_geoinfos() const { return static_cast<int>(channels_.geoinfos.size()); }
  // §3.4: the raw channel means an empty source / target is spoofed with.
  SpoofMeans spoof_means() const { return {channels_.source_mean, channels_.target_mean}; }

  // The points of `window`: the source channels into *source and the target
  // channels into *target (either may be null), overwriting them (their
  // capacity is reused). Throws UnreadableWindow or ReaderError; on a throw
  // the outputs are unspecified.
  virtual void read(const TimeWindow& window, PointSet* source, PointSet* target) const = 0;
  PointSet source(const TimeWindow& window) const;
  PointSet target(const TimeWindow& window) const;

 protected:
  StreamReader(std::string stream, std::string file) : stream_(std::move(stream)), file_(std::move(file)) {}
  // Makes `p` an empty PointSet shaped for this reader's source (or target)
  // channels, keeping its arrays' capacity (a reused PointSet does not
  // page-fault fresh memory). With clear_data false, `data` keeps its size
  // (a caller that overwrites every element then skips the zero fill).
  void reset_points(PointSet& p, bool source, bool clear_data = true) const;

  std::string stream_;
  std::string file_;
  ReaderChannels channels_;
};

// §3.1.3's substring rule: keep `name` iff (there is no include list, or
// some include entry is a substring of it: an empty list keeps nothing, as
// upstream's `any()` of none) and no exclude entry is. Excludes always apply
// (upstream's obs reader drops them when includes are given, §12.15).
bool channel_selected(const std::string& name, const std::optional<std::vector<std::string>>& include,
                      const std::vector<std::string>& exclude);

// Throws ReaderError(stream, file, key) for an include entry that is a
// substring of none of `candidates` (upstream silently ignores it).
void check_includes_match(const std::string& stream, const std::string& file, const std::string& key,
                          const std::optional<std::vector<std::string>>& include,
                          const std::vector<std::string>& candidates);

// Throws ReaderError when a mean / stdev cannot normalise (non-finite, stdev ≤ 0).
void check_statistics(const std::string& stream, const std::string& file, const std::string& key,
                      const std::string& channel, double mean, double stdev);

// §3.3 step 3: (x − mean) / stdev computed in float64, stored float32; NaN stays NaN.
inline float normalise_value(float x, double mean, double stdev) {
  return static_cast<float>((static_cast<double>(x) - mean) / stdev);
}

// Appends `more` to `into` (§3.3: the files of a stream, in file order).
// Throws ReaderError(stream, file, "filenames") when channel or geoinfo
// counts differ. An `into` with no points takes more's shape.
void append_points(PointSet& into, const PointSet& more, const std::string& stream, const std::string& file);

}  // namespace wg
