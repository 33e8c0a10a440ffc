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
    return schema_from(config_rules(), extra, required, unused_upstream_key_names());
  }();
  return s;
}

const Aliases& config_aliases() {
  static const Aliases a = [] {
    Aliases out = recompute_aliases();
    // WeatherGenerator's names from before mini-epochs: its load_merge_configs
    // copies them into the new ones (upstream's config/ifs_fesom_config.yml).
    out["samples_per_epoch"] = "samples_per_mini_epoch";
    out["num_epochs"] = "num_mini_epochs";
    return out;
  }();
  return a;
}

const Schema& stream_schema() {
  static const Schema s =
      // variables, pressure_levels, target_file: keys of upstream's CAMS and
      // FESOM readers, whose stream types are an error of their own here.
      schema_from(stream_rules(), {}, {}, {"channel_weights", "variables", "pressure_levels", "target_file"});
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
  check_placeholders(tree, problems, bad);
  for (const auto& rule : config_rules()) {
    const Leaf* leaf = tree.find(rule.key);
    if (!leaf || bad.count(rule.key)) continue;
    if (auto err = rule.apply(leaf->value, cfg)) {
      problems.push_back(leaf->origin.str() + ": " + rule.key + " " + *err);
      bad.insert(rule.key);
    }
  }
  // Widths that attention splits into heads.
  const auto divisible = [&](const char* width_key, int width, const char* heads_key, int heads) {
    if (bad.count(width_key) || bad.count(heads_key) || heads <= 0 || width % heads == 0) return;
    problems.push_back(where(tree, width_key) + ": " + width_key + " (" + std::to_string(width) +
                       ") must be divisible by " + heads_key + " (" + std::to_string(heads) + ", set at " +
                       where(tree, heads_key) + ")");
  };
  divisible("ae_local_dim_embed", cfg.ae_local_dim_embed, "ae_local_num_heads", cfg.ae_local_num_heads);
  divisible("ae_global_dim_embed", cfg.ae_global_dim_embed, "ae_global_num_heads", cfg.ae_global_num_heads);
  divisible("ae_global_dim_embed", cfg.ae_global_dim_embed, "ae_aggregation_num_heads", cfg.ae_aggregation_num_heads);
  divisible("ae_global_dim_embed", cfg.ae_global_dim_embed, "fe_num_heads", cfg.fe_num_heads);
  if (!bad.count("forecast_steps") && !bad.count("fe_num_blocks") && cfg.forecast_steps > 0 && cfg.fe_num_blocks == 0)
    problems.push_back(where(tree, "forecast_steps") + ": forecast_steps (" + std::to_string(cfg.forecast_steps) +
                       ") > 0 needs a forecast engine: fe_num_blocks (set at " + where(tree, "fe_num_blocks") +
                       ") is 0");
  if (!bad.count("forecast_steps") && !bad.count("forecast_policy") && cfg.forecast_steps > 0 &&
      cfg.forecast_policy.empty())
    problems.push_back(where(tree, "forecast_policy") + ": forecast_policy is null but forecast_steps (set at " +
                       where(tree, "forecast_steps") + ") is " + std::to_string(cfg.forecast_steps) +
                       "; set forecast_policy: fixed");
  if (!bad.count("training_mode") && cfg.training_mode == "forecast" && cfg.forecast_policy.empty() &&
      !bad.count("forecast_policy"))
    problems.push_back(where(tree, "training_mode") + ": training_mode forecast needs forecast_policy (fixed or "
                       "sequential), set at " + where(tree, "forecast_policy"));
  if (!bad.count("start_date") && !bad.count("end_date") && cfg.end_date < cfg.start_date)
    problems.push_back(where(tree, "end_date") + ": end_date (" + yyyymmddhhmm(cfg.end_date) +
                       ") is before start_date (" + yyyymmddhhmm(cfg.start_date) + ", set at " +
                       where(tree, "start_date") + ")");
  if (!bad.count("start_date_val") && !bad.count("end_date_val") && cfg.end_date_val < cfg.start_date_val)
    problems.push_back(where(tree, "end_date_val") + ": end_date_val (" + yyyymmddhhmm(cfg.end_date_val) +
                       ") is before start_date_val (" + yyyymmddhhmm(cfg.start_date_val) + ")");
  decode_recompute(tree, cfg, warn, problems, bad);
  decode_node_rules(tree, cfg, warn, problems, bad);
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
  if (s.type != "synthetic" && !bad.count("filenames") && s.filenames.empty())
    problems.push_back(origin.str() + ": " + ctx + "filenames must name at least one store for a stream of type " +
                       s.type);
  for (const auto& [path, leaf] : settings.under("channel_weights")) {
    if (path == "channel_weights" && empty_map_like(leaf->value)) continue;  // {} or null: no weights
    const std::string channel = path.size() > 16 ? path.substr(16) : "";
    const auto w = as_number(leaf->value);
    if (channel.empty() || !w || *w < 0)
      problems.push_back(leaf->origin.str() + ": " + ctx + "channel_weights must map target channel names to weights >= 0, " +
                         (channel.empty() ? got(leaf->value) : "got " + channel + ": " + render(leaf->value)));
    else
      s.channel_weights.emplace_back(channel, *w);
  }
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
  if (!cfg.streams.empty()) {  // the decoder's heads come from the first stream, for every stream (as upstream)
    const int heads = cfg.streams.front().target_readout.num_heads;
    for (const auto& s : cfg.streams)
      if (s.embed_target_coords.dim_embed % heads != 0)
        problems.push_back(s.origin.str() + ": stream '" + s.name + "': embed_target_coords.dim_embed (" +
                           std::to_string(s.embed_target_coords.dim_embed) +
                           ") must be divisible by target_readout.num_heads of the first stream '" +
                           cfg.streams.front().name + "' (" + std::to_string(heads) +
                           "): upstream takes the decoder's heads from the first stream");
  }
  check_recompute_blocks(tree, cfg, bad, problems);
  check_node_rule_blocks(tree, cfg, bad, problems);
}

}  // namespace wg::cfg
