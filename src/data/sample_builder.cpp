// Samples and batches of the per-point pipeline (see header). Sections:
// construction (validation, window order), reading a stream, building one
// window, the skip policy, batches.
#include "wg/data/sample_builder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <random>
#include <set>

#include "wg/data/object_pool.h"
#include "wg/data/seeds.h"
#include "wg/util/dates.h"

namespace wg {

struct SampleBuilder::Workspace {
  std::vector<PointSet> source, target;        // [S]
  std::vector<std::vector<PointSet>> targets;  // [S][forecast steps]
  PointSet more_source, more_target;           // a stream's further files
};

struct SampleBuilder::Shared {
  ObjectPool<Workspace> workspaces;
  std::atomic<int64_t> skipped{0};
  std::atomic<int64_t> dropped{0};
  std::mutex mutex;
  std::set<int64_t> unreadable;  // windows that failed twice
};

// ---- construction ----------------------------------------------------------------

SampleBuilder::SampleBuilder(const PipelineOptions& options, std::vector<StreamInput> streams,
                             std::shared_ptr<const HealpixGrid> grid)
    : options_(options),
      streams_(std::move(streams)),
      grid_(std::move(grid)),
      windows_(pipeline_windows(options)),
      shared_(std::make_unique<Shared>()) {
  const std::string all = "(all streams)";
  if (!grid_) throw PipelineError(all, "healpix_level", "no HEALPix grid given");
  if (grid_->level() != options_.healpix_level)
    throw PipelineError(all, "healpix_level",
                        "is " + std::to_string(options_.healpix_level) + " but the grid given has level " +
                            std::to_string(grid_->level()));
  if (streams_.empty()) throw PipelineError(all, "streams", "the run has no stream");
  if (options_.forecast_offset < 0 || options_.forecast_steps < 0)
    throw PipelineError(all, "forecast_offset / forecast_steps", "must be ≥ 0");
  if (options_.max_unreadable_in_a_row < 1) throw PipelineError(all, "max_unreadable_in_a_row", "must be ≥ 1");
  for (size_t s = 0; s < streams_.size(); ++s) {
    StreamInput& in = streams_[s];
    in.options.tokens.name = in.options.name;
    if (in.readers.empty()) throw PipelineError(in.options.name, "filenames", "the stream has no reader");
    if (in.options.tokens.token_size < 1) throw PipelineError(in.options.name, "token_size", "must be ≥ 1");
    const StreamReader& r0 = *in.readers[0];
    for (const auto& r : in.readers) {
      if (r->source_channels() != r0.source_channels() || r->target_channels() != r0.target_channels() ||
          r->num_geoinfos() != r0.num_geoinfos())
        throw ReaderError(in.options.name, r->file(), "filenames",
                          "selects other channels than the stream's first file " + r0.file());
    }
    if (options_.mode == TrainingMode::Masking)
      validate_masking(in.options.name, options_.masking, options_.healpix_level, r0.source_channels(),
                       r0.target_channels());
  }
  // Candidate windows (§8.1) and their order.
  const int64_t fsteps = options_.mode == TrainingMode::Forecast ? options_.forecast_steps : 0;
  const int64_t flen = (int64_t(options_.len_hrs) * (fsteps + 1)) / options_.step_hrs;
  const int64_t count = windows_.count() - flen - options_.forecast_offset;
  if (count < 1)
    throw PipelineError(all, "start_date / end_date",
                        "the period " + iso_date(windows_.t_start()) + " … " + iso_date(windows_.t_end()) + " has " +
                            std::to_string(windows_.count()) + " windows of " + std::to_string(options_.len_hrs) +
                            " h every " + std::to_string(options_.step_hrs) + " h, too few for a sample spanning " +
                            std::to_string(flen + options_.forecast_offset + 1) + " windows");
  order_.resize(size_t(count));
  std::iota(order_.begin(), order_.end(), int64_t(0));
  if (options_.shuffle) {
    // Fisher–Yates with an explicit index draw: the same order everywhere.
    std::mt19937_64 rng(mix_seed(options_.seed, hash_name("sample windows")));
    for (int64_t i = count - 1; i > 0; --i) std::swap(order_[size_t(i)], order_[size_t(rng() % uint64_t(i + 1))]);
  }
}

SampleBuilder::~SampleBuilder() = default;
SampleBuilder::SampleBuilder(SampleBuilder&&) noexcept = default;
SampleBuilder& SampleBuilder::operator=(SampleBuilder&&) noexcept = default;

int64_t SampleBuilder::window_of(int64_t sample_id) const {
  const int64_t n = num_candidates();
  return order_[size_t(((sample_id % n) + n) % n)];
}

std::vector<int64_t> SampleBuilder::target_windows(int64_t window) const {
  std::vector<int64_t> out;
  const int64_t last = options_.forecast_offset + options_.forecast_steps;
  for (int64_t f = 0; f <= last; ++f) out.push_back(window + (int64_t(options_.len_hrs) * f) / options_.step_hrs);
  return out;
}

int64_t SampleBuilder::skipped_samples() const { return shared_->skipped.load(); }
int64_t SampleBuilder::dropped_samples() const { return shared_->dropped.load(); }

// ---- reading -------------------------------------------------------------------------

void SampleBuilder::read_stream(const StreamInput& in, const TimeWindow& window, PointSet* source, PointSet* target,
                                Workspace& ws) const {
  in.readers[0]->read(window, source, target);
  for (size_t i = 1; i < in.readers.size(); ++i) {
    in.readers[i]->read(window, source ? &ws.more_source : nullptr, target ? &ws.more_target : nullptr);
    if (source) append_points(*source, ws.more_source, in.options.name, in.readers[i]->file());
    if (target) append_points(*target, ws.more_target, in.options.name, in.readers[i]->file());
  }
}

// ---- one window ----------------------------------------------------------------------

void SampleBuilder::build_at(int64_t window, int64_t sample_id, int64_t mini_epoch, Workspace& ws,
                             std::vector<StreamSample>& out) const {
  const HealpixGrid& grid = *grid_;
  const TimeWindow w = windows_.window(window);
  const uint64_t seed = options_.seed, epoch = uint64_t(mini_epoch), id = uint64_t(sample_id);
  const size_t ns = streams_.size();
  out.resize(ns);
  ws.source.resize(ns);
  ws.target.resize(ns);
  ws.targets.resize(ns);
  for (size_t s = 0; s < ns; ++s) {
    const StreamInput& in = streams_[s];
    const SampleKey key{seed, epoch, id, uint64_t(s)};
    const SpoofMeans means = in.readers[0]->spoof_means();
    PointSet& source = ws.source[s];
    if (options_.mode == TrainingMode::Masking) {
      PointSet& target = ws.target[s];
      read_stream(in, w, &source, &target, ws);
      const MaskStrategy strategy = draw_strategy(options_.masking, seed, epoch, id, uint64_t(s));
      build_masking_sample(grid, in.options.tokens, options_.masking, strategy, source, target, w.start, means, key,
                           out[s]);
      continue;
    }
    read_stream(in, w, &source, nullptr, ws);
    const std::vector<int64_t> tw = target_windows(window);
    std::vector<PointSet>& targets = ws.targets[s];
    const size_t first = size_t(options_.forecast_offset);
    targets.resize(tw.size() - first);
    std::vector<int64_t> starts;
    for (size_t f = first; f < tw.size(); ++f) {
      const TimeWindow t = windows_.window(tw[f]);
      read_stream(in, t, nullptr, &targets[f - first], ws);
      starts.push_back(t.start);
    }
    out[s] = build_forecast_sample(grid, in.options.tokens, source, w.start, targets, starts, means, key);
    // Steps before forecast_offset carry no target (upstream's lists have
    // forecast_offset + forecast_dt + 1 entries, §7.1).
    std::vector<StepTargets> lead(first);
    for (size_t f = 0; f < first; ++f) {
      lead[f].window_start = windows_.window(tw[f]).start;
      lead[f].cell_lens.assign(size_t(grid.num_cells()), 0);
    }
    out[s].targets.insert(out[s].targets.begin(), lead.begin(), lead.end());
  }
}

// ---- the skip policy --------------------------------------------------------------------

BuiltSample SampleBuilder::sample(int64_t sample_id, int64_t mini_epoch) const {
  BuiltSample out;
  sample(sample_id, mini_epoch, out);
  return out;
}

void SampleBuilder::sample(int64_t sample_id, int64_t mini_epoch, BuiltSample& out) const {
  const int64_t n = num_candidates();
  const int64_t pos = ((sample_id % n) + n) % n;
  const int64_t tries = std::min<int64_t>(n, options_.max_unreadable_in_a_row);
  const auto ws = shared_->workspaces.acquire();
  out.sample_id = sample_id;
  bool passed_unreadable = false;
  int64_t unreadable = 0, without_target = 0;  // for the error when every try fails
  for (int64_t j = 0; j < tries; ++j) {
    const int64_t window = order_[size_t((pos + j) % n)];
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      if (shared_->unreadable.count(window)) {
        passed_unreadable = true;
        ++unreadable;
        continue;
      }
    }
    bool readable = false;
    // Two tries: a passing file-system error gets a second chance; damage
    // in the file or a missing date fails again and the window is given up.
    for (int attempt = 0; attempt < 2 && !readable; ++attempt) {
      try {
        build_at(window, sample_id, mini_epoch, *ws, out.streams);
        readable = true;
      } catch (const UnreadableWindow& e) {
        if (attempt == 0) continue;
        std::lock_guard<std::mutex> lock(shared_->mutex);
        if (shared_->unreadable.insert(window).second)
          spdlog::warn("{}; window {} is given up (samples that map to it take the next window of the order)", e.what(),
                       window);
      }
    }
    if (!readable) {
      passed_unreadable = true;
      ++unreadable;
      continue;
    }
    const bool no_target =
        std::all_of(out.streams.begin(), out.streams.end(), [](const StreamSample& s) { return s.target_empty(); });
    if (no_target) {  // §7.1: upstream drops the sample and takes the next position
      shared_->dropped.fetch_add(1);
      ++without_target;
      continue;
    }
    if (passed_unreadable) shared_->skipped.fetch_add(1);
    out.window = window;
    out.window_start = windows_.window(window).start;
    out.windows_skipped = static_cast<int>(j);
    return;
  }
  throw PipelineError("(all streams)", "data",
                      "sample " + std::to_string(sample_id) + ": " + std::to_string(tries) +
                          " windows in a row gave no sample: " + std::to_string(unreadable) +
                          " could not be read (see the warnings) and " + std::to_string(without_target) +
                          " had no target point in any stream (the target channels without data there, or the "
                          "masking leaving nothing to predict); the run cannot go on");
}

// ---- batches ---------------------------------------------------------------------------

BuiltBatch SampleBuilder::batch(const std::vector<int64_t>& sample_ids, int64_t mini_epoch) const {
  BuiltBatch b;
  batch(sample_ids, mini_epoch, b);
  return b;
}

void SampleBuilder::batch(const std::vector<int64_t>& sample_ids, int64_t mini_epoch, BuiltBatch& out) const {
  out.sample_ids = sample_ids;
  out.windows.assign(sample_ids.size(), -1);
  out.samples.resize(sample_ids.size());
  BuiltSample one;
  for (size_t b = 0; b < sample_ids.size(); ++b) {
    std::swap(one.streams, out.samples[b]);  // reuse the batch's buffers
    sample(sample_ids[b], mini_epoch, one);
    std::swap(one.streams, out.samples[b]);
    out.windows[b] = one.window;
  }
  out.layout = layout_batch(out.samples);
}

}  // namespace wg
