// Masking configuration: strategy names and the validation rules of
// wg-data.md §5.3, each rule one PipelineError naming stream and key.
#include <cmath>
#include <sstream>

#include "wg/data/masking.h"
#include "wg/data/pipeline_error.h"

namespace wg {

namespace {

const char* const kStrategyNames[] = {"random", "block", "healpix", "channel", "causal", "combination"};

std::string join(const std::vector<std::string>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  return s.str();
}

bool uses(const MaskingConfig& cfg, MaskStrategy s) {
  if (cfg.strategy == s) return true;
  if (cfg.strategy != MaskStrategy::Combination) return false;
  for (MaskStrategy t : cfg.strategies) {
    if (t == s) return true;
  }
  return false;
}

}  // namespace

const char* to_string(MaskStrategy strategy) { return kStrategyNames[static_cast<int>(strategy)]; }

MaskStrategy parse_mask_strategy(const std::string& stream, const std::string& key, const std::string& name) {
  for (int i = 0; i < 6; ++i) {
    if (name == kStrategyNames[i]) return static_cast<MaskStrategy>(i);
  }
  throw PipelineError(
      stream, key,
      "unknown masking strategy '" + name + "' (expected one of random, block, healpix, channel, causal, combination)");
}

ChannelMaskMode parse_channel_mask_mode(const std::string& stream, const std::string& key, const std::string& name) {
  if (name == "per_cell") return ChannelMaskMode::PerCell;
  if (name == "global") return ChannelMaskMode::Global;
  throw PipelineError(stream, key, "unknown channel masking mode '" + name + "' (expected per_cell or global)");
}

void validate_masking(const std::string& stream, const MaskingConfig& cfg, int healpix_level,
                      const std::vector<std::string>& source_channels,
                      const std::vector<std::string>& target_channels) {
  if (!(cfg.masking_rate >= 0.0 && cfg.masking_rate <= 1.0)) {
    throw PipelineError(stream, "masking_rate", "must be in [0, 1], got " + std::to_string(cfg.masking_rate));
  }
  if (cfg.strategy == MaskStrategy::Combination) {
    const std::string key = "masking_strategy_config.strategies";
    if (cfg.strategies.empty()) throw PipelineError(stream, key, "combination needs at least one strategy");
    for (MaskStrategy s : cfg.strategies) {
      if (s == MaskStrategy::Combination) throw PipelineError(stream, key, "combination cannot contain combination");
    }
    const std::string pkey = "masking_strategy_config.probabilities";
    if (cfg.probabilities.size() != cfg.strategies.size()) {
      throw PipelineError(stream, pkey,
                          "has " + std::to_string(cfg.probabilities.size()) + " entries for " +
                              std::to_string(cfg.strategies.size()) + " strategies");
    }
    double sum = 0.0;
    for (double p : cfg.probabilities) {
      if (!(p >= 0.0)) throw PipelineError(stream, pkey, "entries must be non-negative, got " + std::to_string(p));
      sum += p;
    }
    if (std::fabs(sum - 1.0) > 1e-6) {
      throw PipelineError(stream, pkey, "must sum to 1, sums to " + std::to_string(sum));
    }
  }
  if (uses(cfg, MaskStrategy::Healpix) && (cfg.hl_mask < 0 || cfg.hl_mask >= healpix_level)) {
    throw PipelineError(
        stream, "masking_strategy_config.hl_mask",
        "must be in [0, healpix_level = " + std::to_string(healpix_level) + "), got " + std::to_string(cfg.hl_mask));
  }
  if (uses(cfg, MaskStrategy::Channel) && source_channels != target_channels) {
    throw PipelineError(stream, "source/target channels",
                        "channel masking needs identical source and target channel lists; source has " +
                            std::to_string(source_channels.size()) + " [" + join(source_channels) + "], target has " +
                            std::to_string(target_channels.size()) + " [" + join(target_channels) + "]");
  }
}

}  // namespace wg
