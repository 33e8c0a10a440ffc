// The run's data for one rank (see header).
#include "wg/data/dataset.h"

#include <algorithm>
#include <stdexcept>

#include "wg/data/anemoi_reader.h"
#include "wg/data/pipeline_config.h"
#include "wg/util/dates.h"

namespace wg {

namespace {
// Where a period reaches beyond an anemoi store's dates: those windows are
// spoofed (loss weight 0), as upstream; worth a warning.
void warn_outside(const SampleBuilder& b, const std::string& period, int64_t start, int64_t end,
                  std::vector<std::string>& warnings) {
  for (int64_t s = 0; s < b.num_streams(); ++s)
    for (const auto& r : b.stream(s).readers) {
      const auto* a = dynamic_cast<const AnemoiReader*>(r.get());
      if (!a) continue;
      const std::string who = "stream '" + r->stream() + "', " + r->file() + ": the " + period;
      if (start < a->store_first_date())
        warnings.push_back(who + " starts " + iso_date(start) + ", before the store's first date " +
                           iso_date(a->store_first_date()) +
                           ": windows without data are spoofed (loss weight 0), as upstream");
      if (end > a->store_last_date())
        warnings.push_back(who + " ends " + iso_date(end) + ", after the store's last date " +
                           iso_date(a->store_last_date()) +
                           ": windows without data are spoofed (loss weight 0), as upstream");
    }
}

std::unique_ptr<SampleBuilder> open_builder(const Config& c, bool validation,
                                            const std::shared_ptr<const HealpixGrid>& grid) {
  const PipelineOptions options = pipeline_options(c, validation);
  const TimeWindowHandler windows = pipeline_windows(options);
  std::vector<StreamInput> streams;
  for (const StreamConfig& s : c.streams) {
    StreamInput in;
    in.options = stream_options(c, s);
    in.readers = open_stream_readers(in.options, windows, c.data_seed());
    streams.push_back(std::move(in));
  }
  return std::make_unique<SampleBuilder>(options, std::move(streams), grid);
}
}  // namespace

Dataset::Dataset(const Config& c, int rank, int world)
    : num_epochs_(c.num_mini_epochs),
      batch_per_rank_(c.batch_size_per_gpu),
      validation_batch_per_rank_(c.batch_size_validation_per_gpu),
      rank_(rank),
      world_(world) {
  const auto grid = std::make_shared<const HealpixGrid>(c.healpix_level);
  train_ = open_builder(c, false, grid);
  for (int64_t s = 0; s < train_->num_streams(); ++s) {
    const StreamReader& r = *train_->stream(s).readers.front();
    const StreamConfig& sc = c.streams[size_t(s)];
    shapes_.push_back({sc.name, sc.token_size, sc.diagnostic, r.num_geoinfos(), r.source_channels(), r.target_channels()});
  }
  if (train_->num_candidates() == 0)
    throw std::invalid_argument("no training window: start_date " + yyyymmddhhmm(c.start_date) + " to end_date " +
                                yyyymmddhhmm(c.end_date) + " holds no window of " +
                                std::to_string(pipeline_options(c, false).len_hrs) + " h every " +
                                std::to_string(c.step_hrs) + " h with room for the forecast steps");
  // upstream: len(dataset) = min(windows, samples_per_mini_epoch)
  samples_per_epoch_ = std::min<int64_t>(train_->num_candidates(), c.samples_per_mini_epoch);
  if (samples_per_epoch_ < c.samples_per_mini_epoch)
    warnings_.push_back("samples_per_mini_epoch is " + std::to_string(c.samples_per_mini_epoch) + " but the period has " +
                        std::to_string(train_->num_candidates()) + " windows: a mini-epoch has " +
                        std::to_string(samples_per_epoch_) + " samples (as upstream)");
  const int64_t global_batch = int64_t(c.batch_size_per_gpu) * world;
  if (samples_per_epoch_ < c.samples_per_mini_epoch && samples_per_epoch_ < global_batch)  // the period is the limit
    throw std::invalid_argument("the training period (start_date " + yyyymmddhhmm(c.start_date) + " to end_date " +
                                yyyymmddhhmm(c.end_date) + ") has " + std::to_string(samples_per_epoch_) +
                                " windows, fewer than one global batch (batch_size_per_gpu " +
                                std::to_string(c.batch_size_per_gpu) + " x " + std::to_string(world) +
                                " ranks = " + std::to_string(global_batch) + "): a longer period, or a smaller batch");
  sampler_.emplace(c.data_seed(), samples_per_epoch_, c.batch_size_per_gpu, world);
  warn_outside(*train_, "training period", c.start_date, c.end_date, warnings_);
  summary_ = std::to_string(train_->num_candidates()) + " training windows of " +
             std::to_string(train_->windows().length() / 3600) + " h every " +
             std::to_string(train_->windows().step() / 3600) + " h from " + iso_date(c.start_date) + " to " +
             iso_date(c.end_date) + "; " + std::to_string(steps_per_epoch()) + " steps per mini-epoch";
  if (c.samples_per_validation > 0) {
    validation_ = open_builder(c, true, grid);
    if (validation_->num_candidates() == 0)
      throw std::invalid_argument("no validation window: start_date_val " + yyyymmddhhmm(c.start_date_val) +
                                  " to end_date_val " + yyyymmddhhmm(c.end_date_val) + " holds none");
    // upstream: len = min(windows, samples_per_validation), whole batches per rank
    const int64_t global = int64_t(c.batch_size_validation_per_gpu) * world;
    validation_steps_ =
        std::max<int64_t>(1, std::min(validation_->num_candidates(), c.samples_per_validation) / global);
    warn_outside(*validation_, "validation period", c.start_date_val, c.end_date_val, warnings_);
  }
}

BuiltBatch Dataset::batch(int64_t step) const {
  const int64_t per_epoch = steps_per_epoch();
  const int64_t epoch = step / per_epoch;
  return train_->batch(sampler_->sample_ids(epoch, step % per_epoch, rank_), epoch);
}

BuiltBatch Dataset::validation_batch(int64_t index, int64_t pass) const {
  if (!validation_) throw std::logic_error("the run has no validation (samples_per_validation is 0)");
  std::vector<int64_t> ids;
  const int64_t per_pass = validation_steps_ * world_ * validation_batch_per_rank_;
  const int64_t first = pass * per_pass + (index * world_ + rank_) * validation_batch_per_rank_;
  for (int64_t i = 0; i < validation_batch_per_rank_; ++i) ids.push_back(first + i);
  return validation_->batch(ids, pass);
}

int64_t Dataset::skipped_samples() const {
  int64_t n = train_->skipped_samples() + train_->dropped_samples();
  if (validation_) n += validation_->skipped_samples() + validation_->dropped_samples();
  return n;
}

}  // namespace wg
