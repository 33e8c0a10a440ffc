// Assembles host batches from the stream sources (see header).
#include "wg/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace wg {

Dataset::Dataset(const Config& config, int rank, int world)
    : streams_(config.streams),
      sampler_(config.seed, config.samples_per_mini_epoch, config.batch_size_per_gpu, world),
      seed_(config.seed),
      masking_rate_(config.masking_rate),
      masking_rate_sampling_(config.masking_rate_sampling),
      num_epochs_(config.num_mini_epochs),
      batch_per_rank_(config.batch_size_per_gpu),
      rank_(rank) {
  for (const auto& s : streams_) {
    if (s.type != "synthetic")
      throw std::invalid_argument("stream '" + s.name + "' (" + s.origin.str() + "): type '" + s.type +
                                  "' has no data source in this build");
    sources_.emplace_back(s, config.seed);
  }
}

double Dataset::planning_masking_rate() const {
  if (!masking_rate_sampling_) return -1;  // every batch has the same counts
  return std::max(0.05, masking_rate_ - 2.5 * 0.1 / std::sqrt(double(batch_per_rank_)));
}

Batch Dataset::batch(int64_t step, double masking_rate) const {
  const int64_t epoch = step / steps_per_epoch(), in_epoch = step % steps_per_epoch();
  Batch b;
  b.sample_ids = sampler_.sample_ids(epoch, in_epoch, rank_);
  for (size_t s = 0; s < streams_.size(); ++s) {
    const SyntheticStream& src = sources_[s];
    StreamBatch sb;
    sb.stream = streams_[s].name;
    sb.num_samples = static_cast<int>(b.sample_ids.size());
    sb.tokens = src.tokens();
    sb.token_size = src.token_size();
    sb.channels = src.channels();
    sb.values.reserve(size_t(sb.num_samples) * sb.tokens * sb.token_size * sb.channels);
    const double rate = masking_rate >= 0 ? masking_rate
                        : streams_[s].masking_rate >= 0 ? streams_[s].masking_rate : masking_rate_;
    const bool sample_rate = masking_rate < 0 && masking_rate_sampling_;
    for (int64_t id : b.sample_ids) {
      src.sample(id, sb.values, sb.centroids);
      auto m = token_mask(seed_, id, hash_name(sb.stream), sb.tokens, rate, sample_rate);
      sb.masked.insert(sb.masked.end(), m.begin(), m.end());
    }
    b.streams.push_back(std::move(sb));
  }
  return b;
}

}  // namespace wg
