// The model's recomputable sections as the configuration names them: the
// key under `gradient_checkpointing`, WeatherGenerator's boolean switch (and
// the other spellings upstream uses for it), and where a section's block
// count comes from. One table: the config decoder, the per-node rules and
// the plan (wg/plan/) all read it, so a new section is one entry here plus
// its field in RecomputeConfig.
//
// WeatherGenerator's sections, in forward order: embed, ae_local,
// ae_adapter, ae_aggregation, ae_global, forecast, pred. This model has
// embed, latent (its stand-in for ae_global) and pred; upstream's switches
// for the others are accepted and listed in absent_recompute_switches().
#pragma once

#include <string>
#include <vector>

#include "wg/config/config.h"

namespace wg {

struct RecomputeSectionInfo {
  std::string name;                        // "embed": gradient_checkpointing.embed, plan keys "embed.<stream>/..."
  std::string flag;                        // WeatherGenerator's boolean, canonical spelling
  std::vector<std::string> flag_spellings; // further spellings of the flag (upstream's typos and renames)
  SectionRecompute RecomputeConfig::*field;
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

// WeatherGenerator switches of sections this model does not have yet: the
// key (every spelling) and the section it names. Accepted; no effect.
struct AbsentRecomputeSwitch {
  std::vector<std::string> spellings;  // canonical first
  std::string section;                 // e.g. "local assimilation blocks (ae_local_blocks)"
};
const std::vector<AbsentRecomputeSwitch>& absent_recompute_switches();

const char* recompute_mode_name(RecomputeMode mode);

// Every section set to `mode` (with `every_n`), no block lists: benchmarks
// and tests that compare modes.
RecomputeConfig every_section(RecomputeMode mode, int every_n = 1);

}  // namespace wg
