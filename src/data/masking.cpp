// The masking draws (mask_source, wg-data.md §5.4) with the pipeline's own
// keyed generator, and the target side (mask_target, §5.5).
#include "wg/data/masking.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace wg {

namespace {

// numpy's round(): half to even (the default floating-point rounding mode).
double round_half_even(double v) { return std::nearbyint(v); }

void append_token_points(const TokenPartition& target, int64_t token, int64_t source_token, TargetSelection& sel,
                         bool with_mask_token) {
  for (int64_t k = target.token_start[token]; k < target.token_start[token + 1]; ++k) {
    sel.points.push_back(target.order[k]);
    if (with_mask_token) sel.mask_token.push_back(source_token);
  }
}

}  // namespace

MaskStrategy draw_strategy(const MaskingConfig& cfg, uint64_t seed, uint64_t mini_epoch, uint64_t sample_id,
                           uint64_t stream) {
  if (cfg.strategy != MaskStrategy::Combination) return cfg.strategy;
  PipelineRng rng(seed, mini_epoch, sample_id, cfg.same_strategy_per_batch ? kAllStreams : stream,
                  RngPurpose::Strategy);
  // Inverse CDF as numpy's choice(p=…): the first index whose normalised
  // cumulative probability exceeds u.
  std::vector<double> cdf(cfg.probabilities.size());
  double acc = 0.0;
  for (size_t i = 0; i < cdf.size(); ++i) cdf[i] = (acc += cfg.probabilities[i]);
  for (double& c : cdf) c /= acc;
  const double u = rng.uniform();
  const size_t idx = static_cast<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  return cfg.strategies[std::min(idx, cfg.strategies.size() - 1)];
}

double draw_masking_rate(const MaskingConfig& cfg, PipelineRng& rng) {
  if (!cfg.masking_rate_sampling) return cfg.masking_rate;
  const double r = std::fabs(cfg.masking_rate + kMaskingRateSigma * rng.normal());
  return std::min(0.99, std::max(0.01, r));
}

TokenMask all_masked_mask(MaskStrategy strategy) {
  TokenMask m;
  m.strategy = strategy;
  m.rate = 1.0;
  m.all_masked = true;
  return m;
}

TokenMask draw_token_mask(const MaskingConfig& cfg, MaskStrategy strategy, const TokenPartition& source,
                          int num_source_channels, int healpix_level, PipelineRng& rng) {
  const int64_t nt = source.num_tokens();
  const int64_t nc = source.num_cells;
  if (nt == 0) return all_masked_mask(strategy);
  if (strategy == MaskStrategy::Combination) {
    throw std::invalid_argument("draw_token_mask: resolve 'combination' with draw_strategy first");
  }
  TokenMask m;
  m.strategy = strategy;
  m.rate = draw_masking_rate(cfg, rng);
  m.token.assign(nt, 0);
  if (m.rate == 1.0) {
    m.all_masked = true;
    std::fill(m.token.begin(), m.token.end(), 1);
    return m;
  }
  switch (strategy) {
    case MaskStrategy::Random:
      for (int64_t t = 0; t < nt; ++t) m.token[t] = rng.uniform() < m.rate;
      break;
    case MaskStrategy::Block: {
      const int64_t b = static_cast<int64_t>(round_half_even(m.rate * static_cast<double>(nt)));
      if (b > 0) {
        const int64_t start = static_cast<int64_t>(rng.below(static_cast<uint64_t>(std::max<int64_t>(1, nt - b + 1))));
        for (int64_t t = start; t < std::min(nt, start + b); ++t) m.token[t] = 1;
      }
      break;
    }
    case MaskStrategy::Healpix: {
      const int64_t num_parents = int64_t{12} << (2 * cfg.hl_mask);
      const int shift = 2 * (healpix_level - cfg.hl_mask);
      const int64_t k = static_cast<int64_t>(round_half_even(m.rate * static_cast<double>(num_parents)));
      m.cell.assign(nc, 0);
      for (const int64_t parent : rng.choice(num_parents, std::min(k, num_parents))) {
        const int64_t first = parent << shift;
        std::fill(m.cell.begin() + first, m.cell.begin() + first + (int64_t{1} << shift), 1);
      }
      for (int64_t c = 0; c < nc; ++c) {
        if (!m.cell[c]) continue;
        for (int64_t t = source.cell_token_start[c]; t < source.cell_token_start[c + 1]; ++t) m.token[t] = 1;
      }
      break;
    }
    case MaskStrategy::Channel: {
      const int nch = num_source_channels;
      m.num_channels = nch;
      m.channel.assign(nt * nch, 0);
      if (cfg.channel_mode == ChannelMaskMode::PerCell) {
        for (int64_t i = 0; i < nt * nch; ++i) m.channel[i] = rng.uniform() < m.rate;
      } else {
        const int64_t count = static_cast<int64_t>(nch * m.rate);
        std::vector<uint8_t> chosen(nch, 0);
        for (const int64_t j : rng.choice(nch, count)) chosen[j] = 1;
        for (int64_t t = 0; t < nt; ++t) std::copy(chosen.begin(), chosen.end(), m.channel.begin() + t * nch);
      }
      break;
    }
    case MaskStrategy::Causal:
      for (int64_t c = 0; c < nc; ++c) {
        const int64_t kc = source.cell_tokens(c);
        if (kc <= 1) continue;
        const int64_t keep = std::max<int64_t>(1, kc - static_cast<int64_t>(std::floor(m.rate * kc)));
        for (int64_t j = keep; j < kc; ++j) m.token[source.cell_token_start[c] + j] = 1;
      }
      break;
    case MaskStrategy::Combination:
      break;  // rejected above
  }
  return m;
}

TargetSelection mask_target(const TokenMask& mask, const TokenPartition& source, const TokenPartition& target) {
  const int64_t nc = target.num_cells;
  const bool channel = mask.strategy == MaskStrategy::Channel && !mask.all_masked;
  TargetSelection sel;
  sel.cell_lens.assign(nc, 0);
  sel.points.reserve(target.order.size());
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t before = static_cast<int64_t>(sel.points.size());
    const int64_t t0 = target.cell_token_start[c];
    const int64_t kt = target.cell_tokens(c);
    // A stream without source tokens has an empty partition (and all_masked).
    const bool has_source = c < source.num_cells && !source.cell_token_start.empty();
    const int64_t s0 = has_source ? source.cell_token_start[c] : 0;
    const int64_t ks = has_source ? source.cell_tokens(c) : 0;
    if (mask.all_masked) {
      for (int64_t j = 0; j < kt; ++j) append_token_points(target, t0 + j, -1, sel, false);
    } else {
      switch (mask.strategy) {
        case MaskStrategy::Random:
        case MaskStrategy::Block:
        case MaskStrategy::Combination:
          // zip(target tokens, mask): unmatched target tokens are dropped.
          for (int64_t j = 0; j < std::min(kt, ks); ++j) {
            if (mask.token[s0 + j]) append_token_points(target, t0 + j, -1, sel, false);
          }
          break;
        case MaskStrategy::Healpix:
          if (mask.cell[c]) {
            for (int64_t j = 0; j < kt; ++j) append_token_points(target, t0 + j, -1, sel, false);
          }
          break;
        case MaskStrategy::Causal:
          if (kt == ks) {
            for (int64_t j = 0; j < kt; ++j) {
              if (mask.token[s0 + j]) append_token_points(target, t0 + j, -1, sel, false);
            }
          } else if (ks == 0) {
            for (int64_t j = 0; j < kt; ++j) append_token_points(target, t0 + j, -1, sel, false);
          } else {
            int64_t masked = 0;
            for (int64_t j = 0; j < ks; ++j) masked += mask.token[s0 + j];
            const double ratio = static_cast<double>(masked) / static_cast<double>(ks);
            const int64_t n = std::min(kt, std::max<int64_t>(1, static_cast<int64_t>(ratio * kt)));
            for (int64_t j = kt - n; j < kt; ++j) append_token_points(target, t0 + j, -1, sel, false);
          }
          break;
        case MaskStrategy::Channel:
          for (int64_t j = 0; j < kt; ++j) append_token_points(target, t0 + j, j < ks ? s0 + j : -1, sel, true);
          break;
      }
    }
    sel.cell_lens[c] = static_cast<int32_t>(static_cast<int64_t>(sel.points.size()) - before);
  }
  if (!channel) sel.mask_token.clear();
  return sel;
}

}  // namespace wg
