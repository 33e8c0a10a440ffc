// The recomputation keys: WeatherGenerator's per-section booleans (and
// their other spellings), the structured `gradient_checkpointing` form,
// their resolution into Config::gradient_checkpointing, and block ranges.
// The sections come from the one table in wg/config/recompute_sections.h.
// Owns the one section parser (decode_section) and block-range check that
// the per-node rules (node_rules.cpp) share.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>

#include "config/decode.h"
#include "wg/config/recompute_sections.h"

namespace wg::cfg {
namespace {

std::string legacy_base(const LegacyRecomputeName& l) { return "gradient_checkpointing." + l.old_name; }

std::optional<RecomputeMode> parse_mode(const YAML::Node& n) {
  if (!n.IsScalar()) return std::nullopt;
  for (auto m : {RecomputeMode::None, RecomputeMode::Full, RecomputeMode::Selective, RecomputeMode::EveryN})
    if (n.Scalar() == recompute_mode_name(m)) return m;
  return std::nullopt;
}

}  // namespace

Aliases recompute_aliases() {
  Aliases out;
  for (const auto& s : recompute_sections())
    for (const auto& spelling : s.flag_spellings) out[spelling] = s.flag;
  for (const auto& l : legacy_recompute_flags()) out[l.old_name] = l.new_name;
  return out;
}

const std::vector<std::string>& recompute_required_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& s : recompute_sections())
      if (!s.flag.empty()) k.push_back(s.flag);
    return k;
  }();
  return keys;
}

const std::vector<std::string>& recompute_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = recompute_required_keys();
    std::vector<std::string> names = recompute_section_names();
    for (const auto& l : legacy_recompute_sections()) names.push_back(l.old_name);
    for (const auto& name : names)
      for (const char* sub : {"", ".mode", ".every_n", ".blocks", ".pieces"})
        k.push_back("gradient_checkpointing." + name + sub);
    return k;
  }();
  return keys;
}

SectionRecompute decode_section(const SectionInput& in, Problems& problems,
                                       std::set<std::string>& bad) {
  const auto fail = [&](const SectionPart& part, const std::string& msg) {
    problems.push_back(part.origin.str() + ": " + part.key + " " + msg);
    bad.insert(part.key);
  };
  SectionRecompute sc;
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
    } else if (mode_ok && sc.mode != RecomputeMode::EveryN) {
      fail(*in.every_n,
           std::string("is only allowed with mode every_n (the mode is '") + recompute_mode_name(sc.mode) + "')");
    } else {
      sc.every_n = static_cast<int>(*v);
    }
  } else if (mode_ok && sc.mode == RecomputeMode::EveryN) {
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
  if (in.pieces) {
    const YAML::Node& list = in.pieces->value;
    bool ok = list.IsNull() || list.IsSequence();
    for (size_t i = 0; ok && list.IsSequence() && i < list.size(); ++i) {
      ok = list[i].IsScalar() && !list[i].Scalar().empty();
      if (ok) sc.pieces.push_back(list[i].Scalar());
    }
    sc.pieces_origin = in.pieces->origin;
    if (!ok)
      fail(*in.pieces, "must be a list of the section's piece labels (such as block1.attn, input), " + got(list));
  }
  return sc;
}

void decode_recompute(const Tree& tree, Config& cfg, bool warn, Problems& problems,
                          std::set<std::string>& bad) {
  const auto flag = [&](const std::string& key) -> const Leaf* {  // the leaf if a valid boolean
    const Leaf* leaf = tree.find(key);
    if (leaf && !as_bool(leaf->value)) {  // named as the user spelled it
      problems.push_back(leaf->origin.str() + ": " + leaf->spelled + " must be true or false, " + got(leaf->value));
      bad.insert(key);
    }
    return leaf && !bad.count(key) ? leaf : nullptr;
  };
  const auto part = [&](const std::string& key) -> std::optional<SectionPart> {
    const Leaf* leaf = tree.find(key);
    if (!leaf) return std::nullopt;
    return SectionPart{leaf->value, leaf->origin, key};
  };

  // The structured form of a section: its own key, else a legacy one (with
  // a warning); both at once is an error.
  const auto structured_base = [&](const RecomputeSectionInfo& sec) {
    const std::string base = "gradient_checkpointing." + sec.name;
    for (const auto& l : legacy_recompute_sections()) {
      const std::string old = legacy_base(l);
      const auto entries = tree.under(old);
      if (l.new_name != sec.name || entries.empty()) continue;
      const auto own = tree.under(base);
      if (!own.empty()) {
        problems.push_back(entries.front().second->origin.str() + ": " + old + " and " + base + " (" +
                           own.front().second->origin.str() + ") both set the " + sec.name + " section (" +
                           l.old_name + " is its old name): keep one");
        bad.insert(old);
        return base;
      }
      if (warn)
        spdlog::warn("{}: {} is the old name of {}: please rename it", entries.front().second->origin.str(), old,
                     base);
      return old;
    }
    return base;
  };

  for (const auto& sec : recompute_sections()) {
    const Leaf* flag_leaf = sec.flag.empty() ? nullptr : flag(sec.flag);
    if (warn && flag_leaf && flag_leaf->kind != SourceKind::Default)
      for (const auto& l : legacy_recompute_flags())
        if (l.new_name == sec.flag && flag_leaf->spelled == l.old_name)
          spdlog::warn("{}: {} is this trainer's old name of WeatherGenerator's {}: please rename it",
                       flag_leaf->origin.str(), l.old_name, l.new_name);
    const std::string base = structured_base(sec);
    const auto structured = tree.under(base);
    if (structured.empty()) {  // the boolean decides (a section without one keeps its default)
      SectionRecompute sc = cfg.gradient_checkpointing.*sec.field;
      if (flag_leaf) {
        sc = SectionRecompute{};
        sc.mode = *as_bool(flag_leaf->value) ? sec.flag_on : sec.flag_off;
        sc.origin = flag_leaf->origin;
      }
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
    in.pieces = part(base + ".pieces");
    const SectionRecompute sc = decode_section(in, problems, bad);
    const bool user_structured = std::any_of(structured.begin(), structured.end(), [](const auto& e) {
      return e.second->kind != SourceKind::Default;
    });
    if (warn && user_structured && flag_leaf && flag_leaf->kind != SourceKind::Default)
      spdlog::warn("{}: {} is overridden by {} (set at {}): the structured form wins",
                   flag_leaf->origin.str(), flag_leaf->spelled, base, sc.origin.str());
    cfg.gradient_checkpointing.*sec.field = sc;
  }
}

void check_section_blocks(const SectionRecompute& sc, const RecomputeSectionInfo& section, const std::string& key,
                          const Origin& at, const Config& cfg, const std::set<std::string>& bad,
                          Problems& problems) {
  if (!sc.set || sc.blocks.empty()) return;
  if (bad.count(section.blocks_from) || (section.per_stream && cfg.streams.empty())) return;
  const int count = section.num_blocks(cfg);
  if (count == 0) {
    problems.push_back(at.str() + ": " + key + ": the " + section.name + " section has no blocks (" +
                       section.blocks_from + " is 0)");
    return;
  }
  for (int b : sc.blocks)
    if (b >= count)
      problems.push_back(at.str() + ": " + key + ": block index out of range: " + std::to_string(b) + " (the " +
                         section.name + " section has " + std::to_string(count) + " block(s), " +
                         section.blocks_from + "; valid indices are 0.." + std::to_string(count - 1) + ")");
}

void check_recompute_blocks(const Tree& tree, const Config& cfg, const std::set<std::string>& bad,
                             Problems& problems) {
  for (const auto& sec : recompute_sections()) {
    std::vector<std::string> bases = {"gradient_checkpointing." + sec.name};
    for (const auto& l : legacy_recompute_sections())
      if (l.new_name == sec.name) bases.push_back(legacy_base(l));
    for (const auto& base : bases)
      if (const Leaf* leaf = tree.find(base + ".blocks"))
        check_section_blocks(cfg.gradient_checkpointing.*sec.field, sec, base + ".blocks", leaf->origin, cfg, bad,
                             problems);
  }
}

}  // namespace wg::cfg
