// The options of the per-point data pipeline (readers → StreamSamples →
// BatchLayout) as plain structs, one field per WeatherGenerator config key
// (named in the comments), so the config layer can fill them without the
// data layer knowing about YAML; and the factory that opens a stream's
// readers from its options.
//
// Invariants: plain values, no behaviour besides open_stream_readers();
// times are int64 seconds since 1970-01-01 UTC.
// No LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wg/data/masking.h"
#include "wg/data/stream_reader.h"
#include "wg/data/stream_sample.h"
#include "wg/data/synthetic_reader.h"
#include "wg/data/time_windows.h"

namespace wg {

enum class TrainingMode { Masking, Forecast };     // training_mode: masking | forecast
enum class StreamType { Anemoi, Obs, Synthetic };  // stream key type: anemoi | obs | synthetic

struct StreamOptions {
  std::string name;                      // the stream's top key, e.g. "ERA5"
  StreamType type = StreamType::Anemoi;  // type
  std::vector<std::string> filenames;    // filenames, resolved to paths (absolute, or under data_path)
  ChannelRules channels;                 // source, source_exclude, target, target_exclude
  StreamTokenConfig tokens;              // token_size, tokenize_spacetime, diagnostic, sampling_rate_target
                                         // (stream key, else the global one), max_num_targets; name is set
                                         // from `name`
  int64_t frequency_seconds = 0;         // anemoi: frequency ("HH:MM:SS" → seconds); 0 = the store's
  int64_t base_datetime = 0;             // obs: base_datetime (default 1970-01-01T00:00:00)
  SyntheticOptions synthetic;            // synthetic: the `synthetic:` block
};

struct PipelineOptions {
  int healpix_level = 5;                      // healpix_level
  TrainingMode mode = TrainingMode::Masking;  // training_mode
  MaskingConfig masking;                      // masking_strategy, masking_rate, masking_rate_sampling,
                                              // masking_strategy_config.*
  int forecast_offset = 0;                    // forecast_offset
  int forecast_steps = 0;                     // forecast_steps of this mini-epoch (forecast_dt); masking: 0
  int64_t start_date = 0;                     // start_date (or start_date_val), seconds
  int64_t end_date = 0;                       // end_date (or end_date_val), seconds
  int len_hrs = 6;                            // len_hrs (= forecast_delta_hrs in forecast mode)
  int step_hrs = 6;                           // step_hrs
  uint64_t seed = 0;                          // the run seed (data_loader_rng_seed / seed)
  bool shuffle = true;                        // shuffle: window order shuffled by the seed
  int max_unreadable_in_a_row = 32;           // skip policy: give up after this many unreadable windows
};

// The period's windows (start_date, end_date, len_hrs, step_hrs).
inline TimeWindowHandler pipeline_windows(const PipelineOptions& o) {
  return TimeWindowHandler::from_hours(o.start_date, o.end_date, o.len_hrs, o.step_hrs);
}

// One reader per file of the stream, in file order (synthetic: one reader,
// no file). Throws ReaderError naming the stream and file.
std::vector<std::shared_ptr<const StreamReader>> open_stream_readers(const StreamOptions& stream,
                                                                     const TimeWindowHandler& windows, uint64_t seed);

}  // namespace wg
