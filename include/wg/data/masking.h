// Masking of a stream's source tokens and the matching target selection
// (wg-data.md §5): the configuration and its validation, the mask draw
// (mask_source) and the target side (mask_target).
//
// Invariants:
// - A TokenMask is a value, computed from one stream's own source tokens and
//   one keyed PipelineRng; nothing is carried from stream to stream or from
//   sample to sample (upstream's stale mask, §12.4, cannot happen).
// - Token order of every per-token array = TokenPartition order (cell, then
//   token within the cell).
// - token[t] = 1: token t is hidden from the source and its points are
//   targets. channel[t, j] = 1: data channel j of token t is hidden (zeroed in
//   the source) and is a target channel (the target keeps it, the others
//   become NaN).
// - all_masked: the source is empty and every target token is a target
//   (rate 1.0 without sampling, or a stream without source tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wg/data/pipeline_rng.h"
#include "wg/data/tokenizer.h"

namespace wg {

enum class MaskStrategy { Random, Block, Healpix, Channel, Causal, Combination };
enum class ChannelMaskMode { PerCell, Global };

// Global masking keys of the config; names in comments are the yaml keys.
struct MaskingConfig {
  MaskStrategy strategy = MaskStrategy::Random;             // masking_strategy
  double masking_rate = 0.6;                                // masking_rate
  bool masking_rate_sampling = true;                        // masking_rate_sampling
  int hl_mask = -1;                                         // masking_strategy_config.hl_mask (healpix)
  ChannelMaskMode channel_mode = ChannelMaskMode::PerCell;  // masking_strategy_config.mode (channel)
  std::vector<MaskStrategy> strategies;                     // masking_strategy_config.strategies (combination)
  std::vector<double> probabilities;                        // masking_strategy_config.probabilities (combination)
  bool same_strategy_per_batch = false;                     // masking_strategy_config.same_strategy_per_batch
};

// σ of the rate draw: |N(masking_rate, σ)| clipped to [0.01, 0.99] (§5.2).
constexpr double kMaskingRateSigma = 0.12732395447351627;  // 1 / (2.5 π)

const char* to_string(MaskStrategy strategy);
// Throw PipelineError(stream, key, …) for a name that is no strategy / mode.
MaskStrategy parse_mask_strategy(const std::string& stream, const std::string& key, const std::string& name);
ChannelMaskMode parse_channel_mask_mode(const std::string& stream, const std::string& key, const std::string& name);

// Every rule checked before a sample is built, each failing with one
// PipelineError naming the stream and the key: masking_rate in [0, 1];
// hl_mask in [0, healpix_level) when healpix can be used (also inside
// combination, unlike upstream §12.6); combination: strategies non-empty, no
// nested combination, one probability per strategy, each ≥ 0, summing to 1
// (±1e-6); channel (plain or in combination): identical source and target
// channel lists.
void validate_masking(const std::string& stream, const MaskingConfig& cfg, int healpix_level,
                      const std::vector<std::string>& source_channels, const std::vector<std::string>& target_channels);

struct TokenMask {
  MaskStrategy strategy = MaskStrategy::Random;  // the strategy used (never Combination)
  double rate = 0.0;                             // the masking rate drawn
  bool all_masked = false;
  int num_channels = 0;          // n_src (channel strategy)
  std::vector<uint8_t> token;    // [T] 1 = hidden from the source, a target
  std::vector<uint8_t> channel;  // [T, n_src] channel strategy only
  std::vector<uint8_t> cell;     // [Ncell] healpix strategy only: 1 = cell masked
};

// The strategy of (sample, stream): cfg.strategy, or for combination one
// draw by `probabilities`, keyed per stream or — same_strategy_per_batch —
// per sample (stream kAllStreams).
MaskStrategy draw_strategy(const MaskingConfig& cfg, uint64_t seed, uint64_t mini_epoch, uint64_t sample_id,
                           uint64_t stream);

// The rate draw of §5.2 (one normal draw when sampling). Drawn once per
// mask, not twice as upstream's healpix/channel/causal (§12.5).
double draw_masking_rate(const MaskingConfig& cfg, PipelineRng& rng);

// mask_source (§5.4) for `strategy` (resolved, not Combination) on the
// source tokens of one stream. rng: the stream's RngPurpose::Mask generator.
TokenMask draw_token_mask(const MaskingConfig& cfg, MaskStrategy strategy, const TokenPartition& source,
                          int num_source_channels, int healpix_level, PipelineRng& rng);

// A mask for a stream whose source has no tokens (§4.1: diagnostic, no
// source channels, < 2 points): every target token is a target.
TokenMask all_masked_mask(MaskStrategy strategy);

// Points selected as targets, in target order (cell, token, θ).
struct TargetSelection {
  std::vector<int64_t> points;      // [P] indices into the target PointSet
  std::vector<int64_t> mask_token;  // [P] channel strategy: source token whose channel mask applies; else empty
  std::vector<int32_t> cell_lens;   // [Ncell] points per cell
};

// mask_target (§5.5): per cell, target token j pairs with source token j of
// the same cell. random / block: masked tokens; healpix: the tokens of masked
// cells; causal: §5.5's rule; channel: every token. With all_masked every
// target token.
TargetSelection mask_target(const TokenMask& mask, const TokenPartition& source, const TokenPartition& target);

}  // namespace wg
