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
      shared_(std::make_shared<Shared>()) {
  bool any_anemoi = false;
  for (const auto& s : streams_) {
    if (s.type == "synthetic") {
      synthetic_.emplace_back(SyntheticStream(s, config.seed));
      anemoi_.emplace_back();
    } else if (s.type == "anemoi") {
      synthetic_.emplace_back();
      anemoi_.push_back(std::make_shared<const AnemoiStream>(s, config));
      any_anemoi = true;
    } else {
      throw std::invalid_argument("stream '" + s.name + "' (" + s.origin.str() + "): type '" + s.type +
                                  "' has no data source");
    }
  }
  if (!any_anemoi) return;

  const TimeWindows train = TimeWindows::training(config), val = TimeWindows::validation(config);
  for (const auto& a : anemoi_)
    if (a) {
      a->check_period(train, "training period (start_date " + yyyymmddhhmm(train.start) + ", end_date " +
                                 yyyymmddhhmm(train.end) + ")");
      try {
        a->check_period(val, "validation period");
      } catch (const DataError& e) {  // this trainer runs no validation pass: tell, do not stop
        warnings_.push_back(e.what());
      }
    }
  for (int64_t k = 0; k < train.count(); ++k)
    if (std::all_of(anemoi_.begin(), anemoi_.end(), [k](const auto& a) { return !a || a->has_window(k); }))
      windows_.push_back(k);
  if (windows_.empty())
    throw DataError("no training window of " + std::to_string(config.len_hrs) + " h between start_date " +
                    yyyymmddhhmm(train.start) + " and end_date " + yyyymmddhhmm(train.end) +
                    " has all its dates in every anemoi store (missing_dates excluded)");
  std::mt19937_64 rng(mix_seed(seed_, hash_name("anemoi windows")));
  std::shuffle(windows_.begin(), windows_.end(), rng);
  summary_ = "anemoi data: " + std::to_string(windows_.size()) + " training windows of " +
             std::to_string(config.len_hrs) + " h every " + std::to_string(config.step_hrs) + " h starting " +
             iso_date(train.start) + " to " + iso_date(train.end);
  if (config.samples_per_mini_epoch > int64_t(windows_.size()))
    warnings_.push_back("samples_per_mini_epoch (" + std::to_string(config.samples_per_mini_epoch) + ") exceeds the " +
                        std::to_string(windows_.size()) + " available windows: windows repeat within a mini-epoch");
}

int64_t Dataset::skipped_samples() const { return shared_->skipped.load(); }

double Dataset::planning_masking_rate() const {
  if (!masking_rate_sampling_) return -1;  // every batch has the same counts
  return std::max(0.05, masking_rate_ - 2.5 * 0.1 / std::sqrt(double(batch_per_rank_)));
}

int64_t Dataset::read_window(int64_t id, std::vector<std::vector<float>>& values,
                             std::vector<std::vector<uint8_t>>& valid,
                             std::vector<std::vector<float>>& centroids) const {
  const int64_t n = int64_t(windows_.size());
  for (int64_t j = 0; j < std::min<int64_t>(n, kMaxUnreadableInARow); ++j) {
    const int64_t k = windows_[size_t((id + j) % n)];
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      if (shared_->unreadable.count(k)) continue;
    }
    // Two tries: a passing file-system hiccup (EIO, ESTALE) gets a second
    // chance; damage in the file fails again and the window is given up.
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        for (size_t s = 0; s < anemoi_.size(); ++s)
          if (anemoi_[s]) anemoi_[s]->sample(k, values[s], valid[s], centroids[s]);
        if (j > 0) shared_->skipped.fetch_add(1);
        return k;
      } catch (const DataError& e) {
        for (size_t s = 0; s < anemoi_.size(); ++s) values[s].clear(), valid[s].clear(), centroids[s].clear();
        if (attempt == 0) continue;
        std::lock_guard<std::mutex> lock(shared_->mutex);
        if (shared_->unreadable.insert(k).second)
          spdlog::warn("rank {}: {}; skipping this window (samples that map to it take the next one)", rank_,
                       e.what());
      }
    }
  }
  throw DataError("sample " + std::to_string(id) + ": " + std::to_string(std::min<int64_t>(n, kMaxUnreadableInARow)) +
                  " windows in a row could not be read (see the warnings above); the data is too damaged to go on");
}

Batch Dataset::batch(int64_t step, double masking_rate) const {
  const int64_t epoch = step / steps_per_epoch(), in_epoch = step % steps_per_epoch();
  Batch b;
  b.sample_ids = sampler_.sample_ids(epoch, in_epoch, rank_);
  const size_t S = streams_.size();
  for (size_t s = 0; s < S; ++s) {
    StreamBatch sb;
    sb.stream = streams_[s].name;
    sb.num_samples = static_cast<int>(b.sample_ids.size());
    sb.tokens = anemoi_[s] ? anemoi_[s]->tokens() : synthetic_[s]->tokens();
    sb.token_size = anemoi_[s] ? anemoi_[s]->token_size() : synthetic_[s]->token_size();
    sb.channels = anemoi_[s] ? anemoi_[s]->num_channels() : synthetic_[s]->channels();
    sb.values.reserve(size_t(sb.num_samples) * sb.tokens * sb.token_size * sb.channels);
    b.streams.push_back(std::move(sb));
  }
  const bool sample_rate = masking_rate < 0 && masking_rate_sampling_;
  std::vector<std::vector<float>> values(S), centroids(S);
  std::vector<std::vector<uint8_t>> valid(S);
  for (int64_t id : b.sample_ids) {
    if (!windows_.empty()) b.windows.push_back(read_window(id, values, valid, centroids));
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
