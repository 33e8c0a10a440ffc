// YAML reading, flattening into dotted leaves with origins, overlaying, and
// writing a flat tree back as nested YAML with origin comments.
#include "config/yaml_tree.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace wg::cfg {
namespace {

bool starts_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

bool empty_map_like(const YAML::Node& n) { return n.IsNull() || (n.IsMap() && n.size() == 0); }

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// ---- Tree -----------------------------------------------------------------

const Leaf* Tree::find(const std::string& path) const {
  for (const auto& [p, leaf] : leaves_)
    if (p == path) return &leaf;
  return nullptr;
}

void Tree::set(const std::string& path, Leaf leaf) {
  const std::string below = path + ".";
  const bool has_children = std::any_of(leaves_.begin(), leaves_.end(),
                                        [&](const auto& e) { return starts_with(e.first, below); });
  if (empty_map_like(leaf.value) && has_children) return;  // merging {} changes nothing
  std::vector<std::pair<std::string, Leaf>> kept;
  kept.reserve(leaves_.size() + 1);
  bool placed = false;  // the new leaf takes the place of the first one it replaces
  for (auto& e : leaves_) {
    if (e.first == path || starts_with(e.first, below) || starts_with(path, e.first + ".")) {
      if (!placed) kept.emplace_back(path, std::move(leaf));
      placed = true;
    } else {
      kept.emplace_back(e.first, std::move(e.second));
    }
  }
  if (!placed) kept.emplace_back(path, std::move(leaf));
  leaves_.swap(kept);
}

void Tree::overlay(const Tree& later) {
  for (const auto& [path, leaf] : later.leaves_) set(path, leaf);
}

std::vector<std::pair<std::string, const Leaf*>> Tree::under(const std::string& prefix) const {
  std::vector<std::pair<std::string, const Leaf*>> out;
  for (const auto& [p, leaf] : leaves_)
    if (p == prefix || starts_with(p, prefix + ".")) out.emplace_back(p, &leaf);
  return out;
}

// ---- reading --------------------------------------------------------------

std::optional<YAML::Node> parse_yaml(const std::string& text, const std::string& source,
                                     Problems& problems) {
  try {
    // One document, as PyYAML's safe_load (under OmegaConf) demands: a
    // second one after `---` is not read silently.
    std::vector<YAML::Node> docs = YAML::LoadAll(text);
    if (docs.size() > 1) {
      problems.push_back(source + ":" + std::to_string(docs[1].Mark().line + 1) + ": a second YAML document (after " +
                         "'---'); a config file holds one");
      return std::nullopt;
    }
    return docs.empty() ? YAML::Node() : docs.front();
  } catch (const YAML::ParserException& e) {
    problems.push_back(source + ":" + std::to_string(e.mark.line + 1) +
                       ": YAML syntax error: " + e.msg);
  } catch (const YAML::Exception& e) {
    problems.push_back(source + ": YAML error: " + e.what());
  }
  return std::nullopt;
}

std::optional<YAML::Node> read_yaml_file(const std::string& path, Problems& problems) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    problems.push_back("config file '" + path + "' does not exist");
    return std::nullopt;
  }
  if (fs::is_directory(path, ec)) {
    problems.push_back("config file '" + path + "' is a directory, not a YAML file");
    return std::nullopt;
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    problems.push_back("config file '" + path + "' cannot be read");
    return std::nullopt;
  }
  return parse_yaml(text.str(), path, problems);
}

MapEntries map_entries(const YAML::Node& map) {
  MapEntries out;
  std::function<void(const YAML::Node&, int)> collect = [&](const YAML::Node& m, int depth) {
    std::vector<YAML::Node> merged;
    for (const auto& kv : m) {
      if (!(kv.first.IsScalar() && kv.first.Scalar() == "<<" && kv.first.Tag() != "!")) {
        out.entries.emplace_back(kv.first, kv.second);
        continue;
      }
      std::vector<YAML::Node> values;  // an alias, or a list of them
      if (kv.second.IsSequence()) {
        for (const auto& v : kv.second) values.push_back(v);
      } else {
        values.push_back(kv.second);
      }
      for (const YAML::Node& v : values) {
        if (v.IsMap())
          merged.push_back(v);
        else
          out.not_maps.emplace_back(kv.first, v);
      }
    }
    if (depth == 0) out.own = out.entries.size();
    if (depth > 64) return;  // aliases cannot make a cycle, but stay bounded
    for (const YAML::Node& v : merged) collect(v, depth + 1);
  };
  collect(map, 0);
  return out;
}

void flatten(const YAML::Node& node, const std::string& prefix, const std::string& source,
             SourceKind kind, const Aliases& aliases, Tree& out, Problems& problems) {
  struct Seen {
    std::string spelled;
    int line;
    YAML::Node value;
  };
  std::map<std::string, int> raw_seen;
  std::map<std::string, Seen> canon_seen;
  const auto where = [&](int line) {
    return kind == SourceKind::Set ? source : source + ":" + std::to_string(line);
  };
  const MapEntries me = map_entries(node);
  for (const auto& [key, value] : me.not_maps)
    problems.push_back(where(key.Mark().line + 1) +
                       ": '<<' (a YAML merge key) must merge a map or a list of maps, got " + render(value));
  const auto& entries = me.entries;
  const size_t own = me.own;
  for (size_t e = 0; e < entries.size(); ++e) {
    const auto& kv = entries[e];
    const int line = kv.first.Mark().line + 1;
    if (!kv.first.IsScalar()) {
      problems.push_back(where(line) + ": keys must be plain names, got " + render(kv.first));
      continue;
    }
    const std::string key = kv.first.Scalar();
    const std::string spelled = join_path(prefix, key);
    if (auto it = raw_seen.find(key); it != raw_seen.end()) {
      if (e >= own) continue;  // merged: the map's own key, or an earlier merged map's, wins
      problems.push_back(where(line) + ": duplicate key '" + spelled + "' (first set at line " +
                         std::to_string(it->second) + ")");
      continue;
    }
    raw_seen[key] = line;
    std::string canon = key;
    if (prefix.empty())
      if (auto a = aliases.find(key); a != aliases.end()) canon = a->second;
    if (auto it = canon_seen.find(canon); it != canon_seen.end()) {
      if (e >= own) continue;  // merged: as above
      if (lower(render(it->second.value)) != lower(render(kv.second)))
        problems.push_back(where(line) + ": '" + key + "' and '" + it->second.spelled + "' (line " +
                           std::to_string(it->second.line) + ") both set " + canon +
                           " but with different values (" + render(kv.second) + " vs " +
                           render(it->second.value) + ")");
      continue;
    }
    canon_seen.emplace(canon, Seen{key, line, kv.second});
    const std::string path = join_path(prefix, canon);
    if (kv.second.IsMap() && kv.second.size() > 0) {
      flatten(kv.second, path, source, kind, aliases, out, problems);
    } else {
      out.set(path, Leaf{kv.second, Origin{source, kind == SourceKind::Set ? 0 : line}, kind, spelled});
    }
  }
}

Tree flatten_document(const YAML::Node& doc, const std::string& source, SourceKind kind,
                      const Aliases& aliases, Problems& problems) {
  Tree tree;
  if (doc.IsNull()) return tree;
  if (!doc.IsMap()) {
    problems.push_back(source + ":" + std::to_string(doc.Mark().line + 1) +
                       ": the top level must be a map of 'key: value' entries, got " +
                       (doc.IsSequence() ? "the list " : "'") + render(doc) + (doc.IsSequence() ? "" : "'"));
    return tree;
  }
  flatten(doc, "", source, kind, aliases, tree, problems);
  return tree;
}

Tree parse_override(const std::string& arg, const Aliases& aliases, Problems& problems) {
  Tree tree;
  const std::string source = "--set '" + arg + "'";
  const auto eq = arg.find('=');
  if (eq == std::string::npos) {
    problems.push_back(source + ": expected dotted.key=value (no '=' found)");
    return tree;
  }
  std::string key = trim(arg.substr(0, eq));
  if (key.empty() || key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos) {
    problems.push_back(source + ": '" + key + "' is not a dotted key like train_log_freq.terminal");
    return tree;
  }
  const std::string head = key.substr(0, key.find('.'));
  if (auto a = aliases.find(head); a != aliases.end()) key = a->second + key.substr(head.size());
  std::optional<YAML::Node> parsed;
  try {
    parsed.emplace(YAML::Load(arg.substr(eq + 1)));
  } catch (const YAML::Exception& e) {
    problems.push_back(source + ": the value is not valid YAML: " + e.msg);
    return tree;
  }
  const YAML::Node& value = *parsed;
  if (value.IsMap() && value.size() > 0) {
    flatten(value, key, source, SourceKind::Set, {}, tree, problems);
  } else {
    tree.set(key, Leaf{value, Origin{source, 0}, SourceKind::Set, trim(arg.substr(0, eq))});
  }
  return tree;
}

// ---- writing --------------------------------------------------------------

std::string render(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

namespace {

struct Nest {
  std::vector<std::string> names;
  std::vector<Nest> kids;
  const Leaf* leaf = nullptr;
  std::string path;

  Nest& child(const std::string& name, const std::string& full) {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return kids[i];
    names.push_back(name);
    kids.emplace_back();
    kids.back().path = full;
    return kids.back();
  }
};

void emit_nest(YAML::Emitter& out, const Nest& nest,
               const std::map<std::string, EmitOverride>& overrides) {
  out << YAML::BeginMap;
  for (size_t i = 0; i < nest.names.size(); ++i) {
    const Nest& kid = nest.kids[i];
    const auto ov = overrides.find(kid.path);
    if (ov != overrides.end() && ov->second.omit) continue;
    out << YAML::Key << nest.names[i] << YAML::Value;
    if (!kid.leaf) {
      emit_nest(out, kid, overrides);
      continue;
    }
    std::string comment = kid.leaf->origin.str();
    if (ov != overrides.end()) comment += ov->second.comment;
    if (ov != overrides.end() && ov->second.value) {
      out << *ov->second.value;
    } else {
      YAML::Node value = YAML::Clone(kid.leaf->value);
      if (!value.IsScalar()) value.SetStyle(YAML::EmitterStyle::Flow);
      out << value;
    }
    out << YAML::Comment(comment);
  }
  out << YAML::EndMap;
}

}  // namespace

std::string emit_tree(const Tree& tree, const std::map<std::string, EmitOverride>& overrides) {
  Nest root;
  for (const auto& [path, leaf] : tree.leaves()) {
    Nest* at = &root;
    size_t start = 0;
    while (true) {
      const auto dot = path.find('.', start);
      at = &at->child(path.substr(start, dot - start), path.substr(0, dot));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    at->leaf = &leaf;
  }
  YAML::Emitter out;
  emit_nest(out, root, overrides);
  return std::string(out.c_str()) + "\n";
}

}  // namespace wg::cfg
