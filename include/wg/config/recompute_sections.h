// The model's recomputable sections as the configuration names them: the
// key under `gradient_checkpointing`, WeatherGenerator's boolean switch (and
// the other spellings upstream uses for it), and where a section's block
// count comes from. One table: the config decoder, the per-node rules and
// the plan (wg/plan/) all read it, so a new section is one entry here plus
// its field in RecomputeConfig.
//
// WeatherGenerator's sections, in forward order: embed, ae_local,
// ae_adapter, ae_aggregation, ae_global, forecast, pred. Upstream's PR #1168
// family has a boolean for five of them; aggregation and forecast have none
// (upstream always recomputes them), so only the structured form sets them.
// `latent` (this trainer's earlier name of ae_global) is an alias with a
// warning.
#pragma once

#include <string>
#include <vector>

#include "wg/config/config.h"

namespace wg {

struct RecomputeSectionInfo {
  std::string name;                        // "embed": gradient_checkpointing.embed, plan keys "embed.<stream>/..."
  std::string flag;                        // WeatherGenerator's boolean, upstream's spelling; "" if it has none
  std::vector<std::string> flag_spellings; // further spellings of the flag (corrected typos, older names)
  SectionRecompute RecomputeConfig::*field;
  // What the boolean means: true gives flag_on, false flag_off (the
  // decoder's blocks stay recomputed when pred_gradient_checkpoint_mode is
  // false, as upstream).
  RecomputeMode flag_on = RecomputeMode::Full;
  RecomputeMode flag_off = RecomputeMode::None;
  bool per_stream = false;                 // one instance per stream (plan keys carry the stream)
  // The section's block count for a configuration (the deepest stream for
  // per-stream sections; a section without blocks counts as one), and the
  // key that sets it, for messages.
  int (*num_blocks)(const Config&) = nullptr;
  std::string blocks_from;
};

// This model's sections, in forward order.
const std::vector<RecomputeSectionInfo>& recompute_sections();
// The entry named `name`, or nullptr.
const RecomputeSectionInfo* find_recompute_section(const std::string& name);
std::vector<std::string> recompute_section_names();

// Older names of sections and switches, accepted with a warning.
struct LegacyRecomputeName {
  std::string old_name;  // "latent" (gradient_checkpointing.latent), "ae_global_gradient_checkpoint_mode"
  std::string new_name;  // "ae_global", "assimilate_global_gradient_checkpoint_mode"
};
const std::vector<LegacyRecomputeName>& legacy_recompute_sections();
const std::vector<LegacyRecomputeName>& legacy_recompute_flags();
// The section `name` stands for: itself, or the new name of a legacy one.
std::string current_section_name(const std::string& name);

const char* recompute_mode_name(RecomputeMode mode);

// Every section set to `mode` (with `every_n`), no block lists: benchmarks
// and tests that compare modes.
RecomputeConfig every_section(RecomputeMode mode, int every_n = 1);

}  // namespace wg
