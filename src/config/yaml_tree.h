// Private to the config loader: YAML text -> flat trees of dotted leaves that
// remember where each value was set, and the overlay of such trees.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wg/config/config.h"

namespace wg::cfg {

using Problems = std::vector<std::string>;

enum class SourceKind { Default, File, Set };

// One value: a scalar, a sequence, or an empty map. Not assignable: assigning
// a YAML::Node writes through to the node it refers to (yaml-cpp semantics),
// so containers of leaves are rebuilt, never shifted.
struct Leaf {
  YAML::Node value;
  Origin origin;
  SourceKind kind = SourceKind::File;
  std::string spelled;  // the key as written (before alias canonicalisation)

  Leaf(YAML::Node v, Origin o, SourceKind k, std::string s)
      : value(std::move(v)), origin(std::move(o)), kind(k), spelled(std::move(s)) {}
  Leaf(const Leaf&) = default;
  Leaf(Leaf&&) = default;
  Leaf& operator=(const Leaf&) = delete;
  Leaf& operator=(Leaf&&) = delete;
};

// Dotted path -> leaf, in first-insertion order. Maps merge deeply; a value
// replaces whatever lay at, under or above its path.
class Tree {
 public:
  const Leaf* find(const std::string& path) const;
  void set(const std::string& path, Leaf leaf);
  void overlay(const Tree& later);
  // Leaves at or under `prefix` (a dotted path).
  std::vector<std::pair<std::string, const Leaf*>> under(const std::string& prefix) const;
  const std::vector<std::pair<std::string, Leaf>>& leaves() const { return leaves_; }

 private:
  std::vector<std::pair<std::string, Leaf>> leaves_;
};

// Top-level key spellings folded into one canonical key when read.
using Aliases = std::map<std::string, std::string>;

// Parses `text`; syntax errors go to `problems` as "source:line: ...".
std::optional<YAML::Node> parse_yaml(const std::string& text, const std::string& source,
                                     Problems& problems);
// Reads and parses a file; a missing/unreadable file is one problem.
std::optional<YAML::Node> read_yaml_file(const std::string& path, Problems& problems);

// A map's entries with its YAML merge keys (`<<: *defaults`, or a list of
// aliases) expanded as PyYAML (under OmegaConf) expands them and yaml-cpp
// 0.7 does not: the map's own entries first (`own` of them), then each
// merged map's, its own merges expanded in turn, the earlier merged map
// before the later. A key that comes again is the earlier one's: readers
// keep the first. `not_maps`: each '<<' key with a merged value that is not
// a map.
struct MapEntries {
  std::vector<std::pair<YAML::Node, YAML::Node>> entries;
  size_t own = 0;
  std::vector<std::pair<YAML::Node, YAML::Node>> not_maps;
};
MapEntries map_entries(const YAML::Node& map);

// Flattens the map `node` (under `prefix`) into `out`. Reports duplicate keys,
// non-string keys and two alias spellings with different values.
void flatten(const YAML::Node& node, const std::string& prefix, const std::string& source,
             SourceKind kind, const Aliases& aliases, Tree& out, Problems& problems);

// A file's top level must be a map (or empty). Returns the flat tree.
Tree flatten_document(const YAML::Node& doc, const std::string& source, SourceKind kind,
                      const Aliases& aliases, Problems& problems);

// One "--set dotted.key=value" (value parsed as YAML).
Tree parse_override(const std::string& arg, const Aliases& aliases, Problems& problems);

// A node as one line of YAML (flow style), for messages and output.
std::string render(const YAML::Node& node);

// Nested YAML of `tree` with "# origin" after each leaf. An override adds
// text to a leaf's comment and replaces its value (when given), or leaves the
// key out.
struct EmitOverride {
  std::optional<std::string> value;
  std::string comment;
  bool omit = false;
};
std::string emit_tree(const Tree& tree, const std::map<std::string, EmitOverride>& overrides);

std::string join_path(const std::string& prefix, const std::string& key);
bool empty_map_like(const YAML::Node& n);  // null or {}

}  // namespace wg::cfg
