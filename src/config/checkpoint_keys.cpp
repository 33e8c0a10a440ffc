// The gradient-checkpointing keys: WeatherGenerator's per-section booleans
// (and their alias spellings), the structured `gradient_checkpointing` form,
// their resolution into Config::gradient_checkpointing, and block ranges.
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

void decode_checkpointing(const Tree& tree, Config& cfg, bool warn, Problems& problems,
                          std::set<std::string>& bad) {
  const auto fail = [&](const std::string& key, const Leaf& leaf, const std::string& msg) {
    problems.push_back(leaf.origin.str() + ": " + key + " " + msg);
    bad.insert(key);
  };
  const auto flag = [&](const std::string& key) -> const Leaf* {  // the leaf if a valid boolean
    const Leaf* leaf = tree.find(key);
    if (leaf && !as_bool(leaf->value)) fail(key, *leaf, "must be true or false, " + got(leaf->value));
    return leaf && !bad.count(key) ? leaf : nullptr;
  };

  for (const auto& sec : kSections) {
    SectionCheckpointConfig sc;
    const Leaf* flag_leaf = flag(sec.flag);
    const std::string base = std::string("gradient_checkpointing.") + sec.name;
    const auto structured = tree.under(base);
    if (structured.empty()) {  // the boolean decides
      sc.mode = flag_leaf && *as_bool(flag_leaf->value) ? CheckpointMode::Full : CheckpointMode::None;
      if (flag_leaf) sc.origin = flag_leaf->origin;
      cfg.gradient_checkpointing.*sec.field = sc;
      continue;
    }
    sc.set = true;
    sc.origin = structured.front().second->origin;
    std::string mode_key = base;  // shorthand `embed: full`, else `embed: {mode: full}`
    const Leaf* mode_leaf = tree.find(base);
    if (mode_leaf && empty_map_like(mode_leaf->value)) mode_leaf = nullptr;
    if (!mode_leaf) mode_leaf = tree.find(mode_key = base + ".mode");
    if (mode_leaf) {
      sc.origin = mode_leaf->origin;
      if (auto m = parse_mode(mode_leaf->value)) {
        sc.mode = *m;
      } else {
        fail(mode_key, *mode_leaf, "must be one of none|full|selective|every_n, " + got(mode_leaf->value));
      }
    }
    const bool mode_ok = !bad.count(mode_key);
    if (const Leaf* n_leaf = tree.find(base + ".every_n")) {
      const auto v = as_int(n_leaf->value);
      if (!v || *v < 1 || *v > INT_MAX) {
        fail(base + ".every_n", *n_leaf, "must be an integer >= 1, " + got(n_leaf->value));
      } else if (mode_ok && sc.mode != CheckpointMode::EveryN) {
        fail(base + ".every_n", *n_leaf,
             std::string("is only allowed with mode every_n (the mode is '") + mode_name(sc.mode) + "')");
      } else {
        sc.every_n = static_cast<int>(*v);
      }
    } else if (mode_ok && sc.mode == CheckpointMode::EveryN) {
      fail(mode_key, *mode_leaf, "is every_n, which needs " + base + ".every_n (an integer >= 1)");
    }
    if (const Leaf* b_leaf = tree.find(base + ".blocks")) {
      const YAML::Node& list = b_leaf->value;
      bool ok = list.IsNull() || list.IsSequence();
      for (size_t i = 0; ok && list.IsSequence() && i < list.size(); ++i) {
        const auto v = as_int(list[i]);
        ok = v && *v >= 0 && *v <= INT_MAX;
        if (ok) sc.blocks.push_back(static_cast<int>(*v));
      }
      if (!ok) fail(base + ".blocks", *b_leaf, "must be a list of block indices (integers >= 0), " + got(list));
    }
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

void check_checkpoint_blocks(const Tree& tree, const Config& cfg, const std::set<std::string>& bad,
                             Problems& problems) {
  for (const auto& sec : kSections) {
    const SectionCheckpointConfig& sc = cfg.gradient_checkpointing.*sec.field;
    const std::string key = std::string("gradient_checkpointing.") + sec.name + ".blocks";
    const Leaf* leaf = tree.find(key);
    if (!sc.set || sc.blocks.empty() || !leaf) continue;
    int count = 1;
    std::string why = "the prediction head is one block";
    if (sec.field == &CheckpointConfig::embed) {
      if (cfg.streams.empty()) continue;
      count = 0;
      for (const auto& s : cfg.streams) count = std::max(count, s.embed.num_blocks);
      why = "the largest embed.num_blocks of the streams";
    } else if (sec.field == &CheckpointConfig::latent) {
      if (bad.count("ae_global_num_blocks")) continue;
      count = cfg.ae_global_num_blocks;
      why = "ae_global_num_blocks";
    }
    for (int b : sc.blocks)
      if (b >= count)
        problems.push_back(leaf->origin.str() + ": " + key + ": block index out of range: " +
                           std::to_string(b) + " (the " + sec.name + " section has " +
                           std::to_string(count) + " block(s), " + why + "; valid indices are 0.." +
                           std::to_string(count - 1) + ")");
  }
}

}  // namespace wg::cfg
