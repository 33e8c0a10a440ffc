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
int deepest_decoder(const Config& c) {
  int n = 0;
  for (const auto& s : c.streams) n = std::max(n, s.target_readout.num_layers);
  return n;
}
int local_blocks(const Config& c) { return c.ae_local_num_blocks; }
int adapter_blocks(const Config&) { return 2; }
int aggregation_blocks(const Config& c) { return c.ae_aggregation_num_blocks; }
int global_blocks(const Config& c) { return c.ae_global_num_blocks; }
int forecast_blocks(const Config& c) { return c.fe_num_blocks; }
}  // namespace

const std::vector<RecomputeSectionInfo>& recompute_sections() {
  using M = RecomputeMode;
  static const std::vector<RecomputeSectionInfo> table = {
      {"embed", "embed_gradient_checkpoint_mode", {}, &RecomputeConfig::embed, M::Full, M::None, true, deepest_embed,
       "the largest embed.num_blocks of the streams"},
      {"ae_local", "ae_local_blocks_grdient_checkpoint_mode", {"ae_local_blocks_gradient_checkpoint_mode"},
       &RecomputeConfig::ae_local, M::Full, M::None, false, local_blocks, "ae_local_num_blocks"},
      {"ae_adapter", "ae_adapter_grdient_checkpoint_mode", {"ae_adapter_gradient_checkpoint_mode"},
       &RecomputeConfig::ae_adapter, M::Full, M::None, false, adapter_blocks,
       "the adapter: block 0 cross-attention and MLP, block 1 cross-attention"},
      {"ae_aggregation", "", {}, &RecomputeConfig::ae_aggregation, M::Full, M::None, false, aggregation_blocks,
       "ae_aggregation_num_blocks"},
      {"ae_global", "assimilate_global_gradient_checkpoint_mode", {"ae_global_grdient_checkpoint_mode"},
       &RecomputeConfig::ae_global, M::Full, M::None, false, global_blocks, "ae_global_num_blocks"},
      {"forecast", "", {}, &RecomputeConfig::forecast, M::Full, M::None, false, forecast_blocks, "fe_num_blocks"},
      {"pred", "pred_gradient_checkpoint_mode", {"pred_grdient_checkpoint_mode"}, &RecomputeConfig::pred, M::Full,
       M::EveryN, true, deepest_decoder, "the largest target_readout.num_layers of the streams"},
  };
  return table;
}

const std::vector<LegacyRecomputeName>& legacy_recompute_sections() {
  static const std::vector<LegacyRecomputeName> table = {{"latent", "ae_global"}};
  return table;
}

const std::vector<LegacyRecomputeName>& legacy_recompute_flags() {
  static const std::vector<LegacyRecomputeName> table = {
      {"ae_global_gradient_checkpoint_mode", "assimilate_global_gradient_checkpoint_mode"}};
  return table;
}

std::string current_section_name(const std::string& name) {
  for (const auto& l : legacy_recompute_sections())
    if (l.old_name == name) return l.new_name;
  return name;
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
