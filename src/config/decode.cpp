// Typed decoding and validation: one rule per key (type, range, enum), the
// gradient-checkpointing keys and their WeatherGenerator aliases, stream
// entries, and the checks that span several keys.
#include "config/decode.h"

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

using Error = std::optional<std::string>;

template <class S>
struct Rule {
  std::string key;
  std::function<Error(const YAML::Node&, S&)> apply;
  bool required = true;
};

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string num_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

struct Range {
  std::optional<double> lo, hi;
  bool lo_open = false, hi_open = false;
  bool ok(double v) const {
    return (!lo || (lo_open ? v > *lo : v >= *lo)) && (!hi || (hi_open ? v < *hi : v <= *hi));
  }
  std::string text() const {
    if (lo && hi)
      return std::string(" in ") + (lo_open ? "(" : "[") + num_text(*lo) + ", " + num_text(*hi) +
             (hi_open ? ")" : "]");
    if (lo) return std::string(lo_open ? " > " : " >= ") + num_text(*lo);
    return "";
  }
};
Range at_least(double lo) { return {lo, std::nullopt}; }
const Range kRate{0.0, 1.0, false, true};  // dropout: [0, 1)
const Range kOpenUnit{0.0, 1.0, true, true};

// ---- rule builders ---------------------------------------------------------

template <class S, class Get>
Rule<S> integer(std::string key, Get get, Range r, bool required = true) {
  return {std::move(key),
          [get, r](const YAML::Node& n, S& s) -> Error {
            auto& ref = get(s);
            using T = std::decay_t<decltype(ref)>;
            const auto v = as_int(n);
            bool fits = v && r.ok(static_cast<double>(*v));
            if constexpr (std::is_unsigned_v<T>) {
              fits = fits && *v >= 0;
            } else {
              fits = fits && *v >= std::numeric_limits<T>::min() && *v <= std::numeric_limits<T>::max();
            }
            if (!fits) return "must be an integer" + r.text() + ", " + got(n);
            ref = static_cast<T>(*v);
            return std::nullopt;
          },
          required};
}

template <class S, class Get>
Rule<S> number(std::string key, Get get, Range r, bool required = true) {
  return {std::move(key),
          [get, r](const YAML::Node& n, S& s) -> Error {
            const auto v = as_number(n);
            if (!v || !r.ok(*v)) return "must be a number" + r.text() + ", " + got(n);
            get(s) = *v;
            return std::nullopt;
          },
          required};
}

template <class S, class Get>
Rule<S> boolean(std::string key, Get get, bool required = true) {
  return {std::move(key),
          [get](const YAML::Node& n, S& s) -> Error {
            const auto v = as_bool(n);
            if (!v) return "must be true or false, " + got(n);
            get(s) = *v;
            return std::nullopt;
          },
          required};
}

template <class S, class Get>
Rule<S> text(std::string key, Get get, bool may_be_empty = false) {
  return {std::move(key), [get, may_be_empty](const YAML::Node& n, S& s) -> Error {
            if (n.IsNull() && may_be_empty) return get(s) = "", std::nullopt;
            if (!n.IsScalar() || (n.Scalar().empty() && !may_be_empty))
              return std::string(may_be_empty ? "must be a string, " : "must be a non-empty string, ") + got(n);
            get(s) = n.Scalar();
            return std::nullopt;
          }};
}

template <class S, class Get>
Rule<S> choice(std::string key, Get get, std::vector<std::string> options) {
  return {std::move(key), [get, options](const YAML::Node& n, S& s) -> Error {
            if (!n.IsScalar() || !contains(options, n.Scalar()))
              return "must be one of " + join(options, "|") + ", " + got(n);
            get(s) = n.Scalar();
            return std::nullopt;
          }};
}

template <class S, class Get>
Rule<S> string_list(std::string key, Get get) {
  return {std::move(key),
          [get](const YAML::Node& n, S& s) -> Error {
            std::vector<std::string> out;
            if (!n.IsNull() && !n.IsSequence()) return "must be a list of strings, " + got(n);
            for (const auto& e : n) {
              if (!e.IsScalar()) return "must be a list of strings, " + got(n);
              out.push_back(e.Scalar());
            }
            get(s) = out;
            return std::nullopt;
          },
          false};
}

Error orientation(const YAML::Node& n, Config& c) {
  if (n.IsScalar() && n.Scalar() == "channels") return c.embed_orientation = "channels", std::nullopt;
  if (n.IsScalar() && n.Scalar() == "tokens")
    return std::string("is 'tokens', WeatherGenerator's other orientation, which this trainer does not "
                       "support; use 'channels'");
  return "must be 'channels' (the only orientation supported here), " + got(n);
}

Error checkpoint_policy(const YAML::Node& n, Config& c) {
  const std::string v = n.IsScalar() ? n.Scalar() : "";
  if (v != "manual" && v != "auto") return "must be one of manual|auto, " + got(n);
  c.auto_plan.enabled = v == "auto";
  return std::nullopt;
}

Error nan_policy(const YAML::Node& n, Config& c) {
  const std::string v = n.IsScalar() ? n.Scalar() : "";
  if (v != "error" && v != "skip") return "must be one of error|skip, " + got(n);
  c.nan_policy = v == "error" ? NanPolicy::Error : NanPolicy::Skip;
  return std::nullopt;
}

Error loss_fcts(const YAML::Node& n, Config& c) {
  const std::string want = "must be a non-empty list of [name, weight] pairs with name mse|mae and weight >= 0, ";
  if (!n.IsSequence() || n.size() == 0) return want + got(n);
  std::vector<LossTerm> terms;
  for (const auto& e : n) {
    const bool pair = e.IsSequence() && e.size() == 2 && e[0].IsScalar();
    double weight = -1;  // invalid unless a number >= 0 is given
    if (pair)
      if (const auto v = as_number(e[1])) weight = *v;
    const std::string name = pair ? e[0].Scalar() : "";
    if ((name != "mse" && name != "mae") || weight < 0) return want + "got the entry " + render(e);
    terms.push_back({name, weight});
  }
  c.loss_fcts = terms;
  return std::nullopt;
}

Error stream_type(const YAML::Node& n, StreamConfig& s) {
  if (n.IsScalar() && (n.Scalar() == "synthetic" || n.Scalar() == "anemoi")) return s.type = n.Scalar(), std::nullopt;
  return "must be one of synthetic|anemoi, " + got(n);
}

// WeatherGenerator's date form, YYYYMMDDHHMM (UTC).
template <class Get>
Rule<Config> date(std::string key, Get get) {
  return {std::move(key), [get](const YAML::Node& n, Config& c) -> Error {
            const auto v = n.IsScalar() ? parse_yyyymmddhhmm(n.Scalar()) : std::nullopt;
            if (!v) return "must be a date written YYYYMMDDHHMM (e.g. 197901010000), " + got(n);
            get(c) = *v;
            return std::nullopt;
          }};
}

Error stream_masking_rate(const YAML::Node& n, StreamConfig& s) {
  const auto v = as_number(n);
  if (!v || !(*v == -1.0 || kOpenUnit.ok(*v)))
    return "must be -1 (use the global masking_rate) or a number in (0, 1), " + got(n);
  s.masking_rate = *v;
  return std::nullopt;
}

#define AT(member) [](auto& c) -> auto& { return c.member; }

const std::vector<Rule<Config>>& config_rules() {
  static const std::vector<Rule<Config>> rules = {
      text<Config>("run_id", AT(run_id), true),
      text<Config>("run_root", AT(run_root)),
      integer<Config>("seed", AT(seed), at_least(0)),
      {"embed_orientation", orientation},
      choice<Config>("embed_unembed_mode", AT(embed_unembed_mode), {"block", "full"}),
      integer<Config>("embed_size_centroids", AT(embed_size_centroids), at_least(0)),
      number<Config>("embed_dropout_rate", AT(embed_dropout_rate), kRate),
      number<Config>("embed_dropout_final_rate", AT(embed_dropout_final_rate), kRate),
      integer<Config>("ae_local_dim_embed", AT(ae_local_dim_embed), at_least(1)),
      integer<Config>("ae_global_dim_embed", AT(ae_global_dim_embed), at_least(1)),
      integer<Config>("ae_global_num_blocks", AT(ae_global_num_blocks), at_least(1)),
      integer<Config>("ae_global_num_heads", AT(ae_global_num_heads), at_least(1)),
      number<Config>("ae_global_dropout_rate", AT(ae_global_dropout_rate), kRate),
      integer<Config>("ae_global_mlp_hidden_factor", AT(ae_global_mlp_hidden_factor), at_least(1)),
      integer<Config>("pred_mlp_hidden_factor", AT(pred_mlp_hidden_factor), at_least(1)),
      choice<Config>("norm_type", AT(norm_type), {"LayerNorm", "RMSNorm"}),
      boolean<Config>("with_mixed_precision", AT(with_mixed_precision)),
      choice<Config>("attention_dtype", AT(attention_dtype), {"bf16", "fp32"}),
      text<Config>("streams_directory", AT(streams_directory)),
      integer<Config>("batch_size_per_gpu", AT(batch_size_per_gpu), at_least(1)),
      number<Config>("masking_rate", AT(masking_rate), kOpenUnit),
      boolean<Config>("masking_rate_sampling", AT(masking_rate_sampling)),
      integer<Config>("num_mini_epochs", AT(num_mini_epochs), at_least(1)),
      integer<Config>("samples_per_mini_epoch", AT(samples_per_mini_epoch), at_least(1)),
      integer<Config>("samples_per_validation", AT(samples_per_validation), at_least(0)),
      text<Config>("data_path", AT(data_path), true),
      date("start_date", AT(start_date)),
      date("end_date", AT(end_date)),
      date("start_date_val", AT(start_date_val)),
      date("end_date_val", AT(end_date_val)),
      integer<Config>("len_hrs", AT(len_hrs), at_least(1)),
      integer<Config>("step_hrs", AT(step_hrs), at_least(1)),
      integer<Config>("loader_num_workers", AT(loader_num_workers), at_least(0)),
      integer<Config>("loader_prefetch", AT(loader_prefetch), at_least(1)),
      number<Config>("lr_start", AT(lr.lr_start), at_least(0)),
      number<Config>("lr_max", AT(lr.lr_max), at_least(0)),
      number<Config>("lr_final_decay", AT(lr.lr_final_decay), at_least(0)),
      number<Config>("lr_final", AT(lr.lr_final), at_least(0)),
      integer<Config>("lr_steps_warmup", AT(lr.lr_steps_warmup), at_least(0)),
      integer<Config>("lr_steps_cooldown", AT(lr.lr_steps_cooldown), at_least(0)),
      choice<Config>("lr_policy_warmup", AT(lr.lr_policy_warmup), {"linear", "cosine"}),
      choice<Config>("lr_policy_decay", AT(lr.lr_policy_decay), {"constant", "linear", "cosine"}),
      choice<Config>("lr_policy_cooldown", AT(lr.lr_policy_cooldown), {"linear", "cosine"}),
      choice<Config>("lr_scaling_policy", AT(lr.lr_scaling_policy), {"none", "linear", "sqrt"}),
      number<Config>("grad_clip", AT(grad_clip), at_least(0)),
      number<Config>("weight_decay", AT(weight_decay), at_least(0)),
      {"loss_fcts", loss_fcts},
      {"nan_policy", nan_policy},
      integer<Config>("max_consecutive_nan_skips", AT(max_consecutive_nan_skips), at_least(1)),
      choice<Config>("device", AT(device), {"auto", "cpu", "cuda"}),
      integer<Config>("num_threads", AT(num_threads), at_least(0)),
      number<Config>("ddp_bucket_mb", AT(ddp_bucket_mb), Range{0.0, std::nullopt, true}),
      {"gradient_checkpointing.policy", checkpoint_policy},
      number<Config>("gradient_checkpointing.memory_budget_gib", AT(auto_plan.memory_budget_gib), at_least(0)),
      number<Config>("gradient_checkpointing.memory_margin_gib", AT(auto_plan.memory_margin_gib), at_least(0)),
      integer<Config>("oom_max_retries", AT(auto_plan.oom_max_retries), at_least(0)),
      number<Config>("cpu_memory_limit_gib", AT(auto_plan.cpu_memory_limit_gib), at_least(0)),
      integer<Config>("fault_injection.rank", AT(fault_injection.rank), at_least(-1)),
      integer<Config>("fault_injection.step", AT(fault_injection.step), at_least(-1)),
      boolean<Config>("telemetry.enabled", AT(telemetry.enabled)),
      text<Config>("telemetry.address", AT(telemetry.address)),
      integer<Config>("telemetry.port", AT(telemetry.port), Range{0.0, 65535.0}),
      text<Config>("telemetry.file_sd_dir", AT(telemetry.file_sd_dir), true),
      text<Config>("telemetry.pushgateway", AT(telemetry.pushgateway), true),
      number<Config>("time_limit_minutes", AT(time_limit_minutes), at_least(0)),
      number<Config>("stop_margin_seconds", AT(stop_margin_seconds), at_least(0)),
      integer<Config>("checkpoint_keep", AT(checkpoint_keep), at_least(1)),
      integer<Config>("train_log_freq.terminal", AT(train_log_freq.terminal), at_least(1)),
      integer<Config>("train_log_freq.metrics", AT(train_log_freq.metrics), at_least(1)),
      integer<Config>("train_log_freq.checkpoint", AT(train_log_freq.checkpoint), at_least(1)),
  };
  return rules;
}

// `type` comes first: the synthetic.* keys are required only for a valid type.
const std::vector<Rule<StreamConfig>>& stream_rules() {
  using S = StreamConfig;
  static const std::vector<Rule<S>> rules = {
      {"type", stream_type},
      string_list<S>("filenames", AT(filenames)),
      string_list<S>("source", AT(source)),
      string_list<S>("source_exclude", AT(source_exclude)),
      string_list<S>("target", AT(target)),
      string_list<S>("target_exclude", AT(target_exclude)),
      number<S>("loss_weight", AT(loss_weight), at_least(0), false),
      {"masking_rate", stream_masking_rate, false},
      integer<S>("token_size", AT(token_size), at_least(1)),
      boolean<S>("tokenize_spacetime", AT(tokenize_spacetime), false),
      choice<S>("embed.net", AT(embed.net), {"transformer"}),
      integer<S>("embed.num_tokens", AT(embed.num_tokens), at_least(1)),
      integer<S>("embed.num_heads", AT(embed.num_heads), at_least(1)),
      integer<S>("embed.dim_embed", AT(embed.dim_embed), at_least(1)),
      integer<S>("embed.num_blocks", AT(embed.num_blocks), at_least(1)),
      integer<S>("synthetic.num_channels", AT(synthetic.num_channels), at_least(1)),
      integer<S>("synthetic.grid_lat", AT(synthetic.grid_lat), at_least(1)),
      integer<S>("synthetic.grid_lon", AT(synthetic.grid_lon), at_least(1)),
      integer<S>("synthetic.num_waves", AT(synthetic.num_waves), at_least(1), false),
      number<S>("synthetic.noise", AT(synthetic.noise), at_least(0), false),
      number<S>("synthetic.time_step_hours", AT(synthetic.time_step_hours), Range{0.0, std::nullopt, true}, false),
  };
  return rules;
}

#undef AT

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
    std::vector<std::string> extra = checkpoint_keys(), required = checkpoint_required_keys();
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
  decode_checkpointing(tree, cfg, warn, problems, bad);
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
  check_checkpoint_blocks(tree, cfg, bad, problems);
  check_node_rule_blocks(tree, cfg, bad, problems);
}

}  // namespace wg::cfg
