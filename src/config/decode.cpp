// Typed decoding and validation: the schema of known keys, unknown-key
// messages, decoding a merged tree with the per-key rules (decode_rules.cpp),
// stream entries, and the checks that span several keys.
#include "config/decode.h"
#include "config/decode_rules.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>

#include "wg/config/loader.h"
#include "wg/util/dates.h"

namespace wg::cfg {

std::string got(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "got nothing";
  if (n.IsScalar()) return "got '" + n.Scalar() + "'";
  return std::string(n.IsSequence() ? "got the list " : "got the map ") + render(n);
}

std::optional<long long> as_int(const YAML::Node& n) {
  if (!n.IsScalar() || n.Scalar().empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(n.Scalar().c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

std::optional<bool> as_bool(const YAML::Node& n) {
  bool b = false;
  if (n.IsScalar() && YAML::convert<bool>::decode(n, b)) return b;
  return std::nullopt;
}

std::optional<double> as_number(const YAML::Node& n) {
  if (!n.IsScalar() || n.Scalar().empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(n.Scalar().c_str(), &end);
  if (*end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

namespace {

template <class S>
Schema schema_from(const std::vector<Rule<S>>& rules, const std::vector<std::string>& extra,
                   const std::vector<std::string>& extra_required, std::vector<std::string> opaque) {
  Schema s;
  for (const auto& r : rules) {
    s.leaves.push_back(r.key);
    if (r.required) s.required.push_back(r.key);
  }
  s.leaves.insert(s.leaves.end(), extra.begin(), extra.end());
  s.required.insert(s.required.end(), extra_required.begin(), extra_required.end());
  for (const auto& key : s.leaves)
    for (auto dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
      if (!contains(s.maps, key.substr(0, dot))) s.maps.push_back(key.substr(0, dot));
  s.opaque = std::move(opaque);
  return s;
}

// Direct children of `parent` ("" = top level) among the schema's keys.
std::vector<std::string> children(const Schema& s, const std::string& parent) {
  std::vector<std::string> out;
  const std::string pre = parent.empty() ? "" : parent + ".";
  for (const auto* list : {&s.leaves, &s.maps, &s.opaque})
    for (const auto& key : *list) {
      if (key.compare(0, pre.size(), pre) != 0 || key.size() == pre.size()) continue;
      const std::string name = key.substr(pre.size(), key.find('.', pre.size()) - pre.size());
      if (!contains(out, name)) out.push_back(name);
    }
  return out;
}

std::string where(const Tree& tree, const std::string& key) {
  const Leaf* leaf = tree.find(key);
  return leaf ? leaf->origin.str() : "the built-in value";
}

}  // namespace

const Schema& config_schema() {
  static const Schema s = [] {
    std::vector<std::string> extra = recompute_keys(), required = recompute_required_keys();
    extra.push_back(kNodeRulesKey);
    required.push_back(kNodeRulesKey);
    return schema_from(config_rules(), extra, required, {});
  }();
  return s;
}

const Schema& stream_schema() {
  static const Schema s =
      schema_from(stream_rules(), {}, {}, {"embed_target_coords", "target_readout", "pred_head"});
  return s;
}

void check_keys(const Tree& tree, const Schema& schema, const std::string& context,
                Problems& problems) {
  std::vector<std::string> reported;
  for (const auto& [path, leaf] : tree.leaves()) {
    if (contains(schema.leaves, path)) continue;
    const std::string at = leaf.origin.str() + ": ";
    if (contains(schema.maps, path)) {
      if (!empty_map_like(leaf.value))
        problems.push_back(at + path + context + " must be a map with the keys " +
                           join(children(schema, path), ", ") + ", " + got(leaf.value));
      continue;
    }
    std::string parent;
    for (size_t start = 0;;) {
      const auto dot = path.find('.', start);
      const std::string name = path.substr(start, dot - start);
      const std::string key = join_path(parent, name);
      if (contains(schema.opaque, key)) break;
      if (!contains(schema.maps, key)) {
        if (contains(reported, leaf.origin.source + "|" + key)) break;
        reported.push_back(leaf.origin.source + "|" + key);
        if (contains(schema.leaves, key)) {
          problems.push_back(at + key + context + " takes a single value, not a map");
          break;
        }
        const auto known = children(schema, parent);
        const std::string near = nearest_key(name, known);
        std::string msg = at + "unknown key '" + key + "'" + context;
        if (!near.empty()) {
          msg += " (did you mean '" + join_path(parent, near) + "'?)";
        } else if (!parent.empty()) {
          msg += " (known keys under " + parent + ": " + join(known, ", ") + ")";
        }
        problems.push_back(msg);
        break;
      }
      if (dot == std::string::npos) break;
      parent = key;
      start = dot + 1;
    }
  }
}

void check_required(const Tree& tree, const Schema& schema, const std::string& where,
                    Problems& problems) {
  for (const auto& key : schema.required)
    if (!tree.find(key)) problems.push_back(where + " lacks the key '" + key + "'");
}

std::set<std::string> decode_config(const Tree& tree, Config& cfg, bool warn, Problems& problems) {
  std::set<std::string> bad;
  for (const auto& rule : config_rules()) {
    const Leaf* leaf = tree.find(rule.key);
    if (!leaf) continue;
    if (auto err = rule.apply(leaf->value, cfg)) {
      problems.push_back(leaf->origin.str() + ": " + rule.key + " " + *err);
      bad.insert(rule.key);
    }
  }
  if (!bad.count("ae_global_dim_embed") && !bad.count("ae_global_num_heads") &&
      cfg.ae_global_dim_embed % cfg.ae_global_num_heads != 0)
    problems.push_back(where(tree, "ae_global_dim_embed") + ": ae_global_dim_embed (" +
                       std::to_string(cfg.ae_global_dim_embed) +
                       ") must be divisible by ae_global_num_heads (" +
                       std::to_string(cfg.ae_global_num_heads) + ", set at " +
                       where(tree, "ae_global_num_heads") + ")");
  if (!bad.count("start_date") && !bad.count("end_date") && cfg.end_date < cfg.start_date)
    problems.push_back(where(tree, "end_date") + ": end_date (" + yyyymmddhhmm(cfg.end_date) +
                       ") is before start_date (" + yyyymmddhhmm(cfg.start_date) + ", set at " +
                       where(tree, "start_date") + ")");
  if (!bad.count("start_date_val") && !bad.count("end_date_val") && cfg.end_date_val < cfg.start_date_val)
    problems.push_back(where(tree, "end_date_val") + ": end_date_val (" + yyyymmddhhmm(cfg.end_date_val) +
                       ") is before start_date_val (" + yyyymmddhhmm(cfg.start_date_val) + ")");
  decode_recompute(tree, cfg, warn, problems, bad);
  decode_node_rules(tree, cfg, problems, bad);
  return bad;
}

StreamConfig decode_stream(const std::string& name, const Origin& origin, const Tree& settings,
                           Problems& problems) {
  StreamConfig s;
  s.name = name;
  s.origin = origin;
  const std::string ctx = "stream '" + name + "': ";
  std::set<std::string> bad;
  for (const auto& rule : stream_rules()) {
    const Leaf* leaf = settings.find(rule.key);
    const bool synthetic_key = rule.key.compare(0, 10, "synthetic.") == 0;
    if (!leaf) {
      if (rule.required && !(synthetic_key && (bad.count("type") || s.type != "synthetic")))
        problems.push_back(origin.str() + ": " + ctx + "lacks the required key '" + rule.key + "'");
      continue;
    }
    if (auto err = rule.apply(leaf->value, s)) {
      problems.push_back(leaf->origin.str() + ": " + ctx + rule.key + " " + *err);
      bad.insert(rule.key);
    }
  }
  if (s.type == "anemoi" && !bad.count("filenames") && s.filenames.size() != 1)
    problems.push_back(where(settings, "filenames") + ": " + ctx + "filenames must name exactly one anemoi Zarr store, got " +
                       std::to_string(s.filenames.size()));
  if (s.type == "anemoi" && s.tokenize_spacetime)
    problems.push_back(where(settings, "tokenize_spacetime") + ": " + ctx +
                       "tokenize_spacetime: true is not supported for anemoi streams (tokens group token_size "
                       "neighbouring cells of one time step)");
  if (!bad.count("embed.dim_embed") && !bad.count("embed.num_heads") &&
      s.embed.dim_embed % s.embed.num_heads != 0)
    problems.push_back(where(settings, "embed.dim_embed") + ": " + ctx + "embed.dim_embed (" +
                       std::to_string(s.embed.dim_embed) + ") must be divisible by embed.num_heads (" +
                       std::to_string(s.embed.num_heads) + ")");
  return s;
}

void check_with_streams(const Tree& tree, const Config& cfg, const std::set<std::string>& bad,
                        Problems& problems) {
  if (!bad.count("embed_size_centroids") && !bad.count("ae_local_dim_embed")) {
    for (const auto& s : cfg.streams) {
      const long long limit = static_cast<long long>(s.embed.num_tokens) * cfg.ae_local_dim_embed;
      if (cfg.embed_size_centroids < limit) continue;
      problems.push_back(where(tree, "embed_size_centroids") + ": embed_size_centroids (" +
                         std::to_string(cfg.embed_size_centroids) +
                         ") must be < embed.num_tokens * ae_local_dim_embed = " + std::to_string(limit) +
                         " for stream '" + s.name + "' (" + s.origin.str() + ")");
    }
  }
  check_recompute_blocks(tree, cfg, bad, problems);
  check_node_rule_blocks(tree, cfg, bad, problems);
}

}  // namespace wg::cfg
