// The per-node checkpointing rules (`checkpoint_node_rules`): a list of
// {match, set} maps, decoded from the list leaf's YAML nodes (each problem
// names the rule index and the line of its own node), the hostname glob
// check, and the block ranges of the rules' sections. The sections under
// `set` go through the structured form's parser (decode_section in
// recompute_keys.cpp), so both forms share their rules and messages.
#include <algorithm>
#include <climits>
#include <sstream>

#include <spdlog/spdlog.h>

#include "config/decode.h"
#include "wg/config/loader.h"

namespace wg::cfg {
namespace {

const std::vector<std::string> kRuleKeys = {"match", "set"};
const std::vector<std::string> kMatchKeys = {"hostname", "nodes", "device_memory_gib_min",
                                             "device_memory_gib_max"};
const std::vector<std::string> kSectionKeys = {"mode", "every_n", "blocks", "pieces"};

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string num_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::vector<std::string> section_names() { return recompute_section_names(); }
// The names a rule's `set` accepts: the sections and their legacy names.
std::vector<std::string> accepted_section_names() {
  std::vector<std::string> names = recompute_section_names();
  for (const auto& l : legacy_recompute_sections()) names.push_back(l.old_name);
  return names;
}

// Why `p` is not a usable fnmatch pattern (unclosed brackets or character
// classes, unknown class names, a trailing backslash), or nothing.
std::optional<std::string> glob_error(const std::string& p) {
  static const std::vector<std::string> classes = {"alnum", "alpha", "blank", "cntrl", "digit", "graph",
                                                   "lower", "print", "punct", "space", "upper", "xdigit"};
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\') {
      if (++i == p.size()) return std::string("it ends in a lone '\\'");
      continue;
    }
    if (p[i] != '[') continue;
    const size_t open = i;
    size_t j = i + 1;
    if (j < p.size() && (p[j] == '!' || p[j] == '^')) ++j;
    if (j < p.size() && p[j] == ']') ++j;  // a leading ']' is a literal member
    bool closed = false;
    for (; j < p.size(); ++j) {
      if (p[j] == '[' && j + 1 < p.size() && (p[j + 1] == ':' || p[j + 1] == '.' || p[j + 1] == '=')) {
        const char kind = p[j + 1];
        const size_t end = p.find(std::string(1, kind) + "]", j + 2);
        if (end == std::string::npos)
          return "the '[" + std::string(1, kind) + "' at position " + std::to_string(j + 1) +
                 " is not closed by '" + std::string(1, kind) + "]'";
        const std::string name = p.substr(j + 2, end - j - 2);
        if (kind == ':' && !contains(classes, name))
          return "unknown character class '[:" + name + ":]' (known: " + join(classes) + ")";
        j = end + 1;
        continue;
      }
      if (p[j] == '\\' && j + 1 < p.size()) {
        ++j;
        continue;
      }
      if (p[j] == ']') {
        closed = true;
        break;
      }
    }
    if (!closed) return "the '[' at position " + std::to_string(open + 1) + " is not closed by ']'";
    i = j;
  }
  return std::nullopt;
}

// A value inside the list, with where it was written.
struct Entry {
  YAML::Node value;
  Origin origin;
};

// Decoding state of the one list leaf.
struct Ctx {
  const Leaf& leaf;
  Problems& problems;
  bool warn = false;  // log warnings (legacy names)
  bool ok = true;

  // The line of `n` in the leaf's source; --set values (and nodes without a
  // position) take `fallback`.
  Origin at(const YAML::Node& n, const Origin& fallback) const {
    if (leaf.kind == SourceKind::Set || !n.IsDefined() || n.Mark().is_null()) return fallback;
    return Origin{leaf.origin.source, n.Mark().line + 1};
  }
  void fail(const Origin& o, const std::string& msg) {
    problems.push_back(o.str() + ": " + msg);
    ok = false;
  }
  // The value of `key` in map `m` (the first, if repeated), at its key's line.
  std::optional<Entry> entry(const YAML::Node& m, const std::string& key, const Origin& fallback) const {
    for (const auto& kv : m)
      if (kv.first.IsScalar() && kv.first.Scalar() == key) return Entry{kv.second, at(kv.first, fallback)};
    return std::nullopt;
  }
  // Non-name, repeated and unknown keys of map `m` (named `path`).
  void check_keys(const YAML::Node& m, const std::string& path, const Origin& m_at,
                  const std::vector<std::string>& known, const std::string& what) {
    std::vector<std::string> seen;
    for (const auto& kv : m) {
      const Origin o = at(kv.first, m_at);
      if (!kv.first.IsScalar()) {
        fail(o, path + ": " + what + " names must be plain names, got " + render(kv.first));
        continue;
      }
      const std::string k = kv.first.Scalar();
      if (contains(seen, k)) {
        fail(o, path + ": duplicate " + what + " '" + k + "'");
        continue;
      }
      seen.push_back(k);
      if (contains(known, k)) continue;
      const std::string near = nearest_key(k, known);
      fail(o, path + ": unknown " + what + " '" + k + "' " +
                  (near.empty() ? "(known: " + join(known) + ")" : "(did you mean '" + near + "'?)"));
    }
  }
};

void decode_match(Ctx& c, const Entry& e, const std::string& path, NodeRuleMatch& out) {
  if (empty_map_like(e.value)) return;  // no conditions: every rank
  if (!e.value.IsMap()) {
    c.fail(e.origin, path + " must be a map with the keys " + join(kMatchKeys) + ", " + got(e.value));
    return;
  }
  c.check_keys(e.value, path, e.origin, kMatchKeys, "key");
  if (auto h = c.entry(e.value, "hostname", e.origin)) {
    if (!h->value.IsScalar() || h->value.Scalar().empty()) {
      c.fail(h->origin, path + ".hostname must be a hostname glob (a non-empty string), " + got(h->value));
    } else if (auto why = glob_error(h->value.Scalar())) {
      c.fail(h->origin, path + ".hostname '" + h->value.Scalar() + "' is not a valid glob pattern: " + *why);
    } else {
      out.hostname = h->value.Scalar();
    }
  }
  if (auto n = c.entry(e.value, "nodes", e.origin)) {
    bool ok = n->value.IsNull() || n->value.IsSequence();
    for (size_t i = 0; ok && n->value.IsSequence() && i < n->value.size(); ++i) {
      const auto v = as_int(n->value[i]);
      ok = v && *v >= 0 && *v <= INT_MAX;
      if (ok) out.nodes.push_back(static_cast<int>(*v));
    }
    if (!ok) c.fail(n->origin, path + ".nodes must be a list of node indices (integers >= 0), " + got(n->value));
  }
  std::optional<Entry> bound[2];
  double* field[2] = {&out.min_device_memory_gib, &out.max_device_memory_gib};
  for (int k = 0; k < 2; ++k) {
    const char* key = k == 0 ? "device_memory_gib_min" : "device_memory_gib_max";
    auto b = c.entry(e.value, key, e.origin);
    if (!b) continue;
    const auto v = as_number(b->value);
    if (!v || *v < 0) {
      c.fail(b->origin, path + "." + key + " must be a number >= 0 (GiB), " + got(b->value));
      continue;
    }
    *field[k] = *v;
    bound[k] = b;
  }
  if (bound[0] && bound[1] && out.min_device_memory_gib > out.max_device_memory_gib)
    c.fail(bound[0]->origin, path + ".device_memory_gib_min (" + num_text(out.min_device_memory_gib) +
                                 ") must be <= " + path + ".device_memory_gib_max (" +
                                 num_text(out.max_device_memory_gib) + ", set at " + bound[1]->origin.str() + ")");
}

// The entry of `sec` in a rule's `set` map: its own name, else a legacy
// name of it (with a warning); both at once is an error.
std::pair<std::optional<Entry>, std::string> section_entry(Ctx& c, const Entry& set, const std::string& path,
                                                           const RecomputeSectionInfo& sec) {
  auto own = c.entry(set.value, sec.name, set.origin);
  for (const auto& l : legacy_recompute_sections()) {
    if (l.new_name != sec.name) continue;
    auto old = c.entry(set.value, l.old_name, set.origin);
    if (!old) continue;
    if (own) {
      c.fail(old->origin, path + "." + l.old_name + " and " + path + "." + sec.name + " (" + own->origin.str() +
                              ") both set the " + sec.name + " section (" + l.old_name + " is its old name): keep one");
      return {std::nullopt, sec.name};
    }
    if (c.warn)
      spdlog::warn("{}: {}.{} is the old name of {}.{}: please rename it", old->origin.str(), path, l.old_name, path,
                   sec.name);
    return {old, l.old_name};
  }
  return {own, sec.name};
}

void decode_set(Ctx& c, const Entry& e, const std::string& path, RecomputeConfig& out) {
  if (!e.value.IsMap() || e.value.size() == 0) {
    c.fail(e.origin, path + " must be a non-empty map of sections (" + join(section_names()) +
                         "), each a mode or {mode, every_n, blocks, pieces}, " + got(e.value));
    return;
  }
  c.check_keys(e.value, path, e.origin, accepted_section_names(), "section");
  for (const auto& sec : recompute_sections()) {
    const auto [s, name] = section_entry(c, e, path, sec);
    if (!s) continue;
    SectionInput in;
    in.base = path + "." + name;
    in.origin = s->origin;
    if (s->value.IsMap() && s->value.size() > 0) {  // {mode, every_n, blocks, pieces}
      c.check_keys(s->value, in.base, s->origin, kSectionKeys, "key");
      const auto part = [&](const char* key) -> std::optional<SectionPart> {
        auto p = c.entry(s->value, key, s->origin);
        if (!p) return std::nullopt;
        return SectionPart{p->value, p->origin, in.base + "." + key};
      };
      in.mode = part("mode");
      in.every_n = part("every_n");
      in.blocks = part("blocks");
      in.pieces = part("pieces");
    } else if (!empty_map_like(s->value)) {  // the shorthand: a bare mode
      in.mode = SectionPart{s->value, s->origin, in.base};
    }
    std::set<std::string> bad;
    out.*sec.field = decode_section(in, c.problems, bad);
    if (!bad.empty()) c.ok = false;
  }
}

std::optional<NodeRule> decode_rule(Ctx& c, const YAML::Node& r, size_t index) {
  const std::string path = std::string(kNodeRulesKey) + "[" + std::to_string(index) + "]";
  NodeRule rule;
  rule.origin = c.at(r, c.leaf.origin);
  if (!r.IsMap()) {
    c.fail(rule.origin, path + " must be a map with the keys " + join(kRuleKeys) + ", " + got(r));
    return std::nullopt;
  }
  const bool ok_before = c.ok;
  c.ok = true;
  c.check_keys(r, path, rule.origin, kRuleKeys, "key");
  if (auto m = c.entry(r, "match", rule.origin)) decode_match(c, *m, path + ".match", rule.match);
  if (auto s = c.entry(r, "set", rule.origin)) {
    decode_set(c, *s, path + ".set", rule.set);
  } else {
    c.fail(rule.origin, path + " lacks the key 'set' (the sections to change: " + join(section_names()) + ")");
  }
  const bool ok = c.ok;
  c.ok = ok_before && ok;
  return ok ? std::optional<NodeRule>(rule) : std::nullopt;
}

}  // namespace

void decode_node_rules(const Tree& tree, Config& cfg, bool warn, Problems& problems, std::set<std::string>& bad) {
  cfg.checkpoint_node_rules.clear();
  const Leaf* leaf = tree.find(kNodeRulesKey);
  if (!leaf || leaf->value.IsNull()) return;
  Ctx c{*leaf, problems, warn};
  if (!leaf->value.IsSequence()) {
    c.fail(leaf->origin, std::string(kNodeRulesKey) + " must be a list of rules (maps with the keys " +
                             join(kRuleKeys) + "), " + got(leaf->value));
  } else {
    size_t index = 0;
    for (const auto& r : leaf->value)
      if (auto rule = decode_rule(c, r, index++)) cfg.checkpoint_node_rules.push_back(std::move(*rule));
  }
  if (!c.ok) bad.insert(kNodeRulesKey);
}

void check_node_rule_blocks(const Tree& tree, const Config& cfg, const std::set<std::string>& bad,
                            Problems& problems) {
  const Leaf* leaf = tree.find(kNodeRulesKey);
  if (bad.count(kNodeRulesKey) || !leaf || !leaf->value.IsSequence()) return;
  Ctx c{*leaf, problems};
  size_t index = 0;
  for (const auto& r : leaf->value) {  // decoded without problems: one rule per entry
    if (index >= cfg.checkpoint_node_rules.size()) break;
    const NodeRule& rule = cfg.checkpoint_node_rules[index];
    const std::string path = std::string(kNodeRulesKey) + "[" + std::to_string(index++) + "].set";
    const auto set = c.entry(r, "set", rule.origin);
    if (!set) continue;
    for (const auto& sec : recompute_sections()) {
      const auto [s, name] = section_entry(c, *set, path, sec);  // legacy names too (no second warning)
      const auto b = s && s->value.IsMap() ? c.entry(s->value, "blocks", s->origin) : std::nullopt;
      if (b) check_section_blocks(rule.set.*sec.field, sec, path + "." + name + ".blocks", b->origin, cfg, bad, problems);
    }
  }
}

}  // namespace wg::cfg
