// The gradient-checkpointing keys: WeatherGenerator's per-section booleans
// (and their alias spellings), the structured `gradient_checkpointing` form,
// their resolution into Config::gradient_checkpointing, and block ranges.
// Owns the one section parser (decode_section) and block-range check that
// the per-node rules (node_rules.cpp) share.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>

#include "config/decode.h"

namespace wg::cfg {
namespace {

struct Section {
  const char* name;  // key under gradient_checkpointing
  const char* flag;  // WeatherGenerator's boolean
  SectionCheckpointConfig CheckpointConfig::*field;
};
const Section kSections[] = {
    {"embed", "embed_gradient_checkpoint_mode", &CheckpointConfig::embed},
    {"latent", "ae_global_gradient_checkpoint_mode", &CheckpointConfig::latent},
    {"pred", "pred_gradient_checkpoint_mode", &CheckpointConfig::pred},
};
// WeatherGenerator booleans for sections this model does not have.
const char* const kAbsentSections[][2] = {
    {"ae_local_blocks_gradient_checkpoint_mode", "local assimilation blocks (ae_local_blocks)"},
    {"ae_adapter_gradient_checkpoint_mode", "adapter (ae_adapter)"},
};

const char* mode_name(CheckpointMode m) {
  switch (m) {
    case CheckpointMode::None: return "none";
    case CheckpointMode::Full: return "full";
    case CheckpointMode::Selective: return "selective";
    case CheckpointMode::EveryN: return "every_n";
  }
  return "?";
}

std::optional<CheckpointMode> parse_mode(const YAML::Node& n) {
  if (!n.IsScalar()) return std::nullopt;
  for (auto m : {CheckpointMode::None, CheckpointMode::Full, CheckpointMode::Selective, CheckpointMode::EveryN})
    if (n.Scalar() == mode_name(m)) return m;
  return std::nullopt;
}

}  // namespace

const Aliases& config_aliases() {
  static const Aliases a = {
      {"assimilate_global_gradient_checkpoint_mode", "ae_global_gradient_checkpoint_mode"},
      {"ae_global_grdient_checkpoint_mode", "ae_global_gradient_checkpoint_mode"},
      {"pred_grdient_checkpoint_mode", "pred_gradient_checkpoint_mode"},
      {"ae_local_blocks_grdient_checkpoint_mode", "ae_local_blocks_gradient_checkpoint_mode"},
      {"ae_adapter_grdient_checkpoint_mode", "ae_adapter_gradient_checkpoint_mode"},
  };
  return a;
}

const std::vector<std::string>& checkpoint_required_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& s : kSections) k.push_back(s.flag);
    return k;
  }();
  return keys;
}

const std::vector<std::string>& checkpoint_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = checkpoint_required_keys();
    for (const auto& a : kAbsentSections) k.push_back(a[0]);
    for (const auto& s : kSections)
      for (const char* sub : {"", ".mode", ".every_n", ".blocks"})
        k.push_back(std::string("gradient_checkpointing.") + s.name + sub);
    return k;
  }();
  return keys;
}

const std::vector<CheckpointSection>& checkpoint_sections() {
  static const std::vector<CheckpointSection> v = [] {
    std::vector<CheckpointSection> out;
    for (const auto& s : kSections) out.push_back({s.name, s.field});
    return out;
  }();
  return v;
}

SectionCheckpointConfig decode_section(const SectionInput& in, Problems& problems,
                                       std::set<std::string>& bad) {
  const auto fail = [&](const SectionPart& part, const std::string& msg) {
    problems.push_back(part.origin.str() + ": " + part.key + " " + msg);
    bad.insert(part.key);
  };
  SectionCheckpointConfig sc;
  sc.set = true;
  sc.origin = in.origin;
  bool mode_ok = true;
  if (in.mode) {
    sc.origin = in.mode->origin;
    if (auto m = parse_mode(in.mode->value)) {
      sc.mode = *m;
    } else {
      fail(*in.mode, "must be one of none|full|selective|every_n, " + got(in.mode->value));
      mode_ok = false;
    }
  }
  if (in.every_n) {
    const auto v = as_int(in.every_n->value);
    if (!v || *v < 1 || *v > INT_MAX) {
      fail(*in.every_n, "must be an integer >= 1, " + got(in.every_n->value));
    } else if (mode_ok && sc.mode != CheckpointMode::EveryN) {
      fail(*in.every_n,
           std::string("is only allowed with mode every_n (the mode is '") + mode_name(sc.mode) + "')");
    } else {
      sc.every_n = static_cast<int>(*v);
    }
  } else if (mode_ok && sc.mode == CheckpointMode::EveryN) {
    fail(*in.mode, "is every_n, which needs " + in.base + ".every_n (an integer >= 1)");
  }
  if (in.blocks) {
    const YAML::Node& list = in.blocks->value;
    bool ok = list.IsNull() || list.IsSequence();
    for (size_t i = 0; ok && list.IsSequence() && i < list.size(); ++i) {
      const auto v = as_int(list[i]);
      ok = v && *v >= 0 && *v <= INT_MAX;
      if (ok) sc.blocks.push_back(static_cast<int>(*v));
    }
    if (!ok) fail(*in.blocks, "must be a list of block indices (integers >= 0), " + got(list));
  }
  return sc;
}

void decode_checkpointing(const Tree& tree, Config& cfg, bool warn, Problems& problems,
                          std::set<std::string>& bad) {
  const auto flag = [&](const std::string& key) -> const Leaf* {  // the leaf if a valid boolean
    const Leaf* leaf = tree.find(key);
    if (leaf && !as_bool(leaf->value)) {
      problems.push_back(leaf->origin.str() + ": " + key + " must be true or false, " + got(leaf->value));
      bad.insert(key);
    }
    return leaf && !bad.count(key) ? leaf : nullptr;
  };
  const auto part = [&](const std::string& key) -> std::optional<SectionPart> {
    const Leaf* leaf = tree.find(key);
    if (!leaf) return std::nullopt;
    return SectionPart{leaf->value, leaf->origin, key};
  };

  for (const auto& sec : kSections) {
    const Leaf* flag_leaf = flag(sec.flag);
    const std::string base = std::string("gradient_checkpointing.") + sec.name;
    const auto structured = tree.under(base);
    if (structured.empty()) {  // the boolean decides
      SectionCheckpointConfig sc;
      sc.mode = flag_leaf && *as_bool(flag_leaf->value) ? CheckpointMode::Full : CheckpointMode::None;
      if (flag_leaf) sc.origin = flag_leaf->origin;
      cfg.gradient_checkpointing.*sec.field = sc;
      continue;
    }
    SectionInput in;
    in.base = base;
    in.origin = structured.front().second->origin;
    in.mode = part(base);  // shorthand `embed: full`, else `embed: {mode: full}`
    if (in.mode && empty_map_like(in.mode->value)) in.mode.reset();
    if (!in.mode) in.mode = part(base + ".mode");
    in.every_n = part(base + ".every_n");
    in.blocks = part(base + ".blocks");
    const SectionCheckpointConfig sc = decode_section(in, problems, bad);
    const bool user_structured = std::any_of(structured.begin(), structured.end(), [](const auto& e) {
      return e.second->kind != SourceKind::Default;
    });
    if (warn && user_structured && flag_leaf && flag_leaf->kind != SourceKind::Default)
      spdlog::warn("{}: {} is overridden by {} (set at {}): the structured form wins",
                   flag_leaf->origin.str(), flag_leaf->spelled, base, sc.origin.str());
    cfg.gradient_checkpointing.*sec.field = sc;
  }

  for (const auto& absent : kAbsentSections) {
    const Leaf* leaf = flag(absent[0]);
    if (warn && leaf && leaf->kind != SourceKind::Default)
      spdlog::warn("{}: {} names WeatherGenerator's {} section, which this model does not have; "
                   "it has no effect",
                   leaf->origin.str(), leaf->spelled, absent[1]);
  }
}

void check_section_blocks(const SectionCheckpointConfig& sc, SectionCheckpointConfig CheckpointConfig::*field,
                          const std::string& key, const Origin& at, const Config& cfg,
                          const std::set<std::string>& bad, Problems& problems) {
  if (!sc.set || sc.blocks.empty()) return;
  const char* name = "?";
  for (const auto& sec : kSections)
    if (sec.field == field) name = sec.name;
  int count = 1;
  std::string why = "the prediction head is one block";
  if (field == &CheckpointConfig::embed) {
    if (cfg.streams.empty()) return;
    count = 0;
    for (const auto& s : cfg.streams) count = std::max(count, s.embed.num_blocks);
    why = "the largest embed.num_blocks of the streams";
  } else if (field == &CheckpointConfig::latent) {
    if (bad.count("ae_global_num_blocks")) return;
    count = cfg.ae_global_num_blocks;
    why = "ae_global_num_blocks";
  }
  for (int b : sc.blocks)
    if (b >= count)
      problems.push_back(at.str() + ": " + key + ": block index out of range: " + std::to_string(b) + " (the " +
                         name + " section has " + std::to_string(count) + " block(s), " + why +
                         "; valid indices are 0.." + std::to_string(count - 1) + ")");
}

void check_checkpoint_blocks(const Tree& tree, const Config& cfg, const std::set<std::string>& bad,
                             Problems& problems) {
  for (const auto& sec : kSections) {
    const std::string key = std::string("gradient_checkpointing.") + sec.name + ".blocks";
    if (const Leaf* leaf = tree.find(key))
      check_section_blocks(cfg.gradient_checkpointing.*sec.field, sec.field, key, leaf->origin, cfg, bad,
                           problems);
  }
}

}  // namespace wg::cfg
