// Assembles host batches from the stream sources (see header).
#include "wg/data/dataset.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>

#include "wg/util/dates.h"

namespace wg {

namespace {
constexpr int kMaxUnreadableInARow = 32;
}

struct Dataset::Shared {
  std::atomic<int64_t> skipped{0};
  std::mutex mutex;
  std::set<int64_t> unreadable;  // windows that failed to read
};

Dataset::Dataset(const Config& config, int rank, int world)
    : streams_(config.streams),
      sampler_(config.seed, config.samples_per_mini_epoch, config.batch_size_per_gpu, world),
      seed_(config.seed),
      masking_rate_(config.masking_rate),
      masking_rate_sampling_(config.masking_rate_sampling),
      num_epochs_(config.num_mini_epochs),
      batch_per_rank_(config.batch_size_per_gpu),
      rank_(rank),
      world_(world),
      shared_(std::make_shared<Shared>()) {
  bool any_anemoi = false;
  for (const auto& s : streams_) {
    if (s.type == "synthetic") {
      synthetic_.emplace_back(SyntheticStream(s, config.seed));
      anemoi_.emplace_back();
      shapes_.push_back({s.name, s.token_size, s.synthetic.num_channels, {}});
    } else if (s.type == "anemoi") {
      synthetic_.emplace_back();
      anemoi_.push_back(std::make_shared<const AnemoiStream>(s, config));
      shapes_.push_back({s.name, s.token_size, anemoi_.back()->num_channels(), anemoi_.back()->channels()});
      any_anemoi = true;
    } else {
      throw std::invalid_argument("stream '" + s.name + "' (" + s.origin.str() + "): type '" + s.type +
                                  "' has no data source");
    }
  }
  const int64_t global_batch = int64_t(batch_per_rank_) * world;
  if (config.samples_per_validation > 0)
    validation_steps_ = std::max<int64_t>(1, config.samples_per_validation / global_batch);
  if (!any_anemoi) return;

  const TimeWindows train = TimeWindows::training(config), val = TimeWindows::validation(config);
  for (const auto& a : anemoi_)
    if (a) {
      a->check_period(train, "training period (start_date " + yyyymmddhhmm(train.start) + ", end_date " +
                                 yyyymmddhhmm(train.end) + ")");
      if (validation_steps_ > 0)
        a->check_period(val, "validation period (start_date_val " + yyyymmddhhmm(val.start) + ", end_date_val " +
                                 yyyymmddhhmm(val.end) + ")");
    }
  windows_ = available_windows(train);
  if (windows_.empty())
    throw DataError("no training window of " + std::to_string(config.len_hrs) + " h starting between start_date " +
                    yyyymmddhhmm(train.start) + " and end_date " + yyyymmddhhmm(train.end) +
                    " has all its dates in every anemoi store (missing_dates excluded)");
  std::mt19937_64 rng(mix_seed(seed_, hash_name("anemoi windows")));
  std::shuffle(windows_.begin(), windows_.end(), rng);
  summary_ = "anemoi data: " + std::to_string(windows_.size()) + " training windows of " +
             std::to_string(config.len_hrs) + " h every " + std::to_string(config.step_hrs) + " h starting " +
             iso_date(train.start) + " to " + iso_date(train.end);
  if (validation_steps_ > 0) {
    val_windows_ = available_windows(val);
    if (val_windows_.empty())
      throw DataError("no validation window between start_date_val " + yyyymmddhhmm(val.start) +
                      " and end_date_val " + yyyymmddhhmm(val.end) + " has all its dates in every anemoi store");
    summary_ += ", " + std::to_string(val_windows_.size()) + " validation windows from " + iso_date(val.start);
    if (val.start < train.end + train.length && train.start < val.end + val.length)  // half-open spans
      warnings_.push_back("the validation period (" + iso_date(val.start) + " to " + iso_date(val.end) +
                          ") overlaps the training period (" + iso_date(train.start) + " to " + iso_date(train.end) +
                          ")");
  }
  if (config.samples_per_mini_epoch > int64_t(windows_.size()))
    warnings_.push_back("samples_per_mini_epoch (" + std::to_string(config.samples_per_mini_epoch) + ") exceeds the " +
                        std::to_string(windows_.size()) + " available windows: windows repeat within a mini-epoch");
}

std::vector<int64_t> Dataset::available_windows(const TimeWindows& period) const {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < period.count(); ++k) {
    const int64_t t0 = period.start + k * period.step;
    if (std::all_of(anemoi_.begin(), anemoi_.end(), [t0](const auto& a) { return !a || a->has_window(t0); }))
      out.push_back(t0);
  }
  return out;
}

int64_t Dataset::skipped_samples() const { return shared_->skipped.load(); }

double Dataset::planning_masking_rate() const {
  if (!masking_rate_sampling_) return -1;  // every batch has the same counts
  return std::max(kMaskingRateFloor, masking_rate_ - 2.5 * kMaskingRateSpread / std::sqrt(double(batch_per_rank_)));
}

int64_t Dataset::read_window(const std::vector<int64_t>& list, int64_t pos, std::vector<std::vector<float>>& values,
                             std::vector<std::vector<uint8_t>>& valid,
                             std::vector<std::vector<float>>& centroids) const {
  const int64_t n = int64_t(list.size());
  for (int64_t j = 0; j < std::min<int64_t>(n, kMaxUnreadableInARow); ++j) {
    const int64_t t0 = list[size_t((pos + j) % n)];
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      if (shared_->unreadable.count(t0)) continue;
    }
    // Two tries: a passing file-system hiccup (EIO, ESTALE) gets a second
    // chance; damage in the file fails again and the window is given up.
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        for (size_t s = 0; s < anemoi_.size(); ++s)
          if (anemoi_[s]) anemoi_[s]->sample(t0, values[s], valid[s], centroids[s]);
        if (j > 0) shared_->skipped.fetch_add(1);
        return t0;
      } catch (const DataError& e) {
        for (size_t s = 0; s < anemoi_.size(); ++s) values[s].clear(), valid[s].clear(), centroids[s].clear();
        if (attempt == 0) continue;
        std::lock_guard<std::mutex> lock(shared_->mutex);
        if (shared_->unreadable.insert(t0).second)
          spdlog::warn("rank {}: {}; skipping this window (samples that map to it take the next one)", rank_,
                       e.what());
      }
    }
  }
  throw DataError("sample at window position " + std::to_string(pos) + ": " +
                  std::to_string(std::min<int64_t>(n, kMaxUnreadableInARow)) +
                  " windows in a row could not be read (see the warnings above); the data is too damaged to go on");
}

Batch Dataset::batch(int64_t step, double masking_rate) const {
  const int64_t epoch = step / steps_per_epoch(), in_epoch = step % steps_per_epoch();
  const std::vector<int64_t> ids = sampler_.sample_ids(epoch, in_epoch, rank_);
  return assemble(ids, ids, windows_, masking_rate, masking_rate < 0 && masking_rate_sampling_);
}

Batch Dataset::validation_batch(int64_t index) const {
  // Position p of the validation set: batch `index`, this rank's share.
  // Synthetic ids start far above any training id; anemoi windows are spread
  // evenly over the validation period (wrapping if there are fewer).
  constexpr int64_t kValidationIds = int64_t(1) << 48;
  const int64_t used = validation_steps_ * batch_per_rank_ * world_, n = int64_t(val_windows_.size());
  std::vector<int64_t> ids, positions;
  for (int i = 0; i < batch_per_rank_; ++i) {
    const int64_t p = (index * world_ + rank_) * batch_per_rank_ + i;
    ids.push_back(kValidationIds + p);
    positions.push_back(n == 0 ? 0 : used <= n ? p * n / used : p % n);
  }
  return assemble(ids, positions, val_windows_, masking_rate_, false);
}

Batch Dataset::assemble(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                        const std::vector<int64_t>& list, double masking_rate, bool sample_rate) const {
  Batch b;
  b.sample_ids = ids;
  const size_t S = streams_.size();
  for (size_t s = 0; s < S; ++s) {
    StreamBatch sb;
    sb.stream = streams_[s].name;
    sb.num_samples = static_cast<int>(ids.size());
    sb.tokens = anemoi_[s] ? anemoi_[s]->tokens() : synthetic_[s]->tokens();
    sb.token_size = anemoi_[s] ? anemoi_[s]->token_size() : synthetic_[s]->token_size();
    sb.channels = anemoi_[s] ? anemoi_[s]->num_channels() : synthetic_[s]->channels();
    sb.values.reserve(size_t(sb.num_samples) * sb.tokens * sb.token_size * sb.channels);
    b.streams.push_back(std::move(sb));
  }
  std::vector<std::vector<float>> values(S), centroids(S);
  std::vector<std::vector<uint8_t>> valid(S);
  for (size_t n = 0; n < ids.size(); ++n) {
    const int64_t id = ids[n];
    if (!list.empty()) b.windows.push_back(read_window(list, positions[n], values, valid, centroids));
    for (size_t s = 0; s < S; ++s) {
      StreamBatch& sb = b.streams[s];
      const double rate = masking_rate >= 0                 ? masking_rate
                          : streams_[s].masking_rate >= 0 ? streams_[s].masking_rate
                                                          : masking_rate_;
      auto m = token_mask(seed_, id, hash_name(sb.stream), sb.tokens, rate, sample_rate);
      if (anemoi_[s]) {
        // The model sees only visible tokens and is scored only on masked
        // ones: a visible token carries the source channels (the others
        // zeroed), a masked token the targets (validity says which count).
        const auto& src = anemoi_[s]->is_source();
        const size_t per_token = size_t(sb.token_size) * size_t(sb.channels);
        for (size_t t = 0; t < m.size(); ++t)
          if (!m[t])
            for (size_t p = 0; p < per_token; ++p)
              if (!src[p % size_t(sb.channels)]) values[s][t * per_token + p] = 0.0f;
        sb.values.insert(sb.values.end(), values[s].begin(), values[s].end());
        sb.valid.insert(sb.valid.end(), valid[s].begin(), valid[s].end());
        sb.centroids.insert(sb.centroids.end(), centroids[s].begin(), centroids[s].end());
        values[s].clear(), valid[s].clear(), centroids[s].clear();
      } else {
        synthetic_[s]->sample(id, sb.values, sb.centroids);
      }
      sb.masked.insert(sb.masked.end(), m.begin(), m.end());
    }
  }
  return b;
}

}  // namespace wg
