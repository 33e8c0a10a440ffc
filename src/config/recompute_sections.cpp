// The table of recomputable sections (see header).
#include "wg/config/recompute_sections.h"

#include <algorithm>

namespace wg {

namespace {
int deepest_embed(const Config& c) {
  int n = 0;
  for (const auto& s : c.streams) n = std::max(n, s.embed.num_blocks);
  return n;
}
int latent_blocks(const Config& c) { return c.ae_global_num_blocks; }
int one_block(const Config&) { return 1; }
}  // namespace

const std::vector<RecomputeSectionInfo>& recompute_sections() {
  static const std::vector<RecomputeSectionInfo> table = {
      {"embed", "embed_gradient_checkpoint_mode", {}, &RecomputeConfig::embed, true, deepest_embed,
       "the largest embed.num_blocks of the streams"},
      {"latent",
       "ae_global_gradient_checkpoint_mode",
       {"assimilate_global_gradient_checkpoint_mode", "ae_global_grdient_checkpoint_mode"},
       &RecomputeConfig::latent,
       false,
       latent_blocks,
       "ae_global_num_blocks"},
      {"pred", "pred_gradient_checkpoint_mode", {"pred_grdient_checkpoint_mode"}, &RecomputeConfig::pred, false,
       one_block, "the prediction head is one block"},
  };
  return table;
}

const RecomputeSectionInfo* find_recompute_section(const std::string& name) {
  for (const auto& s : recompute_sections())
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<std::string> recompute_section_names() {
  std::vector<std::string> out;
  for (const auto& s : recompute_sections()) out.push_back(s.name);
  return out;
}

const std::vector<AbsentRecomputeSwitch>& absent_recompute_switches() {
  static const std::vector<AbsentRecomputeSwitch> table = {
      {{"ae_local_blocks_gradient_checkpoint_mode", "ae_local_blocks_grdient_checkpoint_mode"},
       "local assimilation blocks (ae_local_blocks)"},
      {{"ae_adapter_gradient_checkpoint_mode", "ae_adapter_grdient_checkpoint_mode"}, "adapter (ae_adapter)"},
  };
  return table;
}

RecomputeConfig every_section(RecomputeMode mode, int every_n) {
  RecomputeConfig c;
  for (const auto& sec : recompute_sections()) {
    SectionRecompute& s = c.*sec.field;
    s = SectionRecompute{};
    s.set = true;
    s.mode = mode;
    s.every_n = every_n;
  }
  return c;
}

const char* recompute_mode_name(RecomputeMode m) {
  switch (m) {
    case RecomputeMode::None: return "none";
    case RecomputeMode::Full: return "full";
    case RecomputeMode::Selective: return "selective";
    case RecomputeMode::EveryN: return "every_n";
  }
  return "?";
}

}  // namespace wg
