// Config -> pipeline options (see header).
#include "wg/data/pipeline_config.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "wg/data/pipeline_error.h"
#include "wg/util/dates.h"

namespace wg {

namespace {
// "HH:MM:SS" (or "HH:MM") -> seconds; the stream key `frequency`.
int64_t frequency_seconds(const StreamConfig& s) {
  if (s.frequency.empty()) return 0;
  int h = 0, m = 0, sec = 0;
  char tail = 0;
  const int n = std::sscanf(s.frequency.c_str(), "%d:%d:%d%c", &h, &m, &sec, &tail);
  if ((n != 2 && n != 3) || h < 0 || m < 0 || m > 59 || sec < 0 || sec > 59 || (h == 0 && m == 0 && sec == 0))
    throw PipelineError(s.name, "frequency", "must be a period written HH:MM:SS (e.g. \"12:00:00\"), got '" +
                                                 s.frequency + "'");
  return int64_t(h) * 3600 + int64_t(m) * 60 + sec;
}

int64_t base_datetime(const StreamConfig& s) {
  if (s.base_datetime.empty()) return 0;
  if (const auto t = parse_iso_date(s.base_datetime)) return *t;
  throw PipelineError(s.name, "base_datetime", "must be a date like 1970-01-01T00:00:00, got '" + s.base_datetime + "'");
}
}  // namespace

PipelineOptions pipeline_options(const Config& c, bool validation) {
  PipelineOptions o;
  o.healpix_level = c.healpix_level;
  o.mode = c.training_mode == "forecast" ? TrainingMode::Forecast : TrainingMode::Masking;
  MaskingConfig& m = o.masking;
  m.strategy = parse_mask_strategy("(all streams)", "masking_strategy", c.masking_strategy);
  m.masking_rate = c.masking_rate;
  m.masking_rate_sampling = c.masking_rate_sampling;
  m.hl_mask = c.masking_strategy_config.hl_mask;
  m.channel_mode = parse_channel_mask_mode("(all streams)", "masking_strategy_config.mode", c.masking_strategy_config.mode);
  for (const std::string& s : c.masking_strategy_config.strategies)
    m.strategies.push_back(parse_mask_strategy("(all streams)", "masking_strategy_config.strategies", s));
  m.probabilities = c.masking_strategy_config.probabilities;
  m.same_strategy_per_batch = c.masking_strategy_config.same_strategy_per_batch;
  o.forecast_offset = c.forecast_offset;
  o.forecast_steps = o.mode == TrainingMode::Forecast || c.forecast_steps > 0 ? c.forecast_steps : 0;
  o.start_date = validation ? c.start_date_val : c.start_date;
  o.end_date = validation ? c.end_date_val : c.end_date;
  // Forecast mode: windows of forecast_delta_hrs (0: len_hrs) hours.
  o.len_hrs = o.mode == TrainingMode::Forecast && c.forecast_delta_hrs > 0 ? c.forecast_delta_hrs : c.len_hrs;
  o.step_hrs = c.step_hrs;
  o.seed = c.data_seed();
  o.shuffle = validation || c.shuffle;  // upstream shuffles validation always (wg-data.md §8.2)
  return o;
}

StreamOptions stream_options(const Config& c, const StreamConfig& s) {
  const std::string& data_path = c.data_path;
  StreamOptions o;
  o.name = s.name;
  o.type = s.type == "anemoi" ? StreamType::Anemoi : s.type == "obs" ? StreamType::Obs : StreamType::Synthetic;
  for (const std::string& f : s.filenames) {
    const std::filesystem::path p(f);
    if (!p.is_absolute() && data_path.empty())
      throw PipelineError(s.name, "filenames",
                          "entry '" + f + "' is relative, but no data root is set (data_path, --data-path or "
                          "$WG_DATA_PATH)");
    o.filenames.push_back(p.is_absolute() ? f : (std::filesystem::path(data_path) / p).string());
  }
  o.channels = {s.source, s.source_exclude, s.target, s.target_exclude};
  o.tokens.name = s.name;
  o.tokens.token_size = s.token_size;
  o.tokens.tokenize_spacetime = s.tokenize_spacetime;
  o.tokens.diagnostic = s.diagnostic;
  o.tokens.sampling_rate_target = s.sampling_rate_target > 0 ? s.sampling_rate_target : c.sampling_rate_target;
  o.tokens.max_num_targets = s.max_num_targets;
  o.frequency_seconds = frequency_seconds(s);
  o.base_datetime = base_datetime(s);
  o.synthetic = {s.synthetic.num_channels, s.synthetic.grid_lat,  s.synthetic.grid_lon,
                 s.synthetic.num_waves,    s.synthetic.noise,     s.synthetic.time_step_hours};
  return o;
}

}  // namespace wg
