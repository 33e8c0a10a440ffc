// The per-key rules of the configuration (see decode_rules.h): rule
// builders by value type, then the run's and a stream entry's keys.
#include "config/decode_rules.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <type_traits>

#include "config/decode.h"
#include "wg/util/dates.h"

namespace wg::cfg {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

namespace {

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

// Compares the field `get` selects.
template <class S, class Get>
std::function<bool(const S&, const S&)> same_as(Get get) {
  return [get](const S& a, const S& b) { return get(a) == get(b); };
}

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
          required, same_as<S>(get)};
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
          required, same_as<S>(get)};
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
          required, same_as<S>(get)};
}

template <class S, class Get>
Rule<S> text(std::string key, Get get, bool may_be_empty = false) {
  return {std::move(key), [get, may_be_empty](const YAML::Node& n, S& s) -> Error {
            if (n.IsNull() && may_be_empty) return get(s) = "", std::nullopt;
            if (!n.IsScalar() || (n.Scalar().empty() && !may_be_empty))
              return std::string(may_be_empty ? "must be a string, " : "must be a non-empty string, ") + got(n);
            get(s) = n.Scalar();
            return std::nullopt;
          },
          true, same_as<S>(get)};
}

template <class S, class Get>
Rule<S> choice(std::string key, Get get, std::vector<std::string> options) {
  return {std::move(key), [get, options](const YAML::Node& n, S& s) -> Error {
            if (!n.IsScalar() || !contains(options, n.Scalar()))
              return "must be one of " + join(options, "|") + ", " + got(n);
            get(s) = n.Scalar();
            return std::nullopt;
          },
          true, same_as<S>(get)};
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
          false, same_as<S>(get)};
}

Error orientation(const YAML::Node& n, Config& c) {
  if (n.IsScalar() && n.Scalar() == "channels") return c.embed_orientation = "channels", std::nullopt;
  if (n.IsScalar() && n.Scalar() == "tokens")
    return std::string("is 'tokens', WeatherGenerator's other orientation, which this trainer does not "
                       "support; use 'channels'");
  return "must be 'channels' (the only orientation supported here), " + got(n);
}

Error recompute_policy(const YAML::Node& n, Config& c) {
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
          },
          true, same_as<Config>(get)};
}

Error stream_masking_rate(const YAML::Node& n, StreamConfig& s) {
  const auto v = as_number(n);
  if (!v || !(*v == -1.0 || kOpenUnit.ok(*v)))
    return "must be -1 (use the global masking_rate) or a number in (0, 1), " + got(n);
  s.masking_rate = *v;
  return std::nullopt;
}

// A run id names a directory under run_root: one path component of safe
// characters, so `run_id: ../x` or an absolute path cannot write elsewhere.
Error run_id(const YAML::Node& n, Config& c) {
  if (!n.IsNull() && !n.IsScalar()) return "must be a string, " + got(n);
  const std::string v = n.IsNull() ? "" : n.Scalar();
  const bool safe = v.size() <= 128 && v != "." && v != ".." &&
                    v.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
                        std::string::npos &&
                    (v.empty() || v[0] != '-');
  if (!safe)
    return "must be one directory name of at most 128 letters, digits, '.', '_' and '-' (not starting with '-', "
           "not '.' or '..'), or empty for a generated id; " +
           got(n);
  c.run_id = v;
  return std::nullopt;
}

bool same_loss_terms(const Config& a, const Config& b) {
  if (a.loss_fcts.size() != b.loss_fcts.size()) return false;
  for (size_t i = 0; i < a.loss_fcts.size(); ++i)
    if (a.loss_fcts[i].name != b.loss_fcts[i].name || a.loss_fcts[i].weight != b.loss_fcts[i].weight) return false;
  return true;
}

}  // namespace

#define AT(member) [](auto& c) -> auto& { return c.member; }

const std::vector<Rule<Config>>& config_rules() {
  static const std::vector<Rule<Config>> rules = {
      {"run_id", run_id, true, same_as<Config>(AT(run_id))},
      text<Config>("run_root", AT(run_root)),
      integer<Config>("seed", AT(seed), at_least(0)),
      {"embed_orientation", orientation, true, same_as<Config>(AT(embed_orientation))},
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
      {"loss_fcts", loss_fcts, true, same_loss_terms},
      {"nan_policy", nan_policy, true, same_as<Config>(AT(nan_policy))},
      integer<Config>("max_consecutive_nan_skips", AT(max_consecutive_nan_skips), at_least(1)),
      choice<Config>("device", AT(device), {"auto", "cpu", "cuda"}),
      integer<Config>("num_threads", AT(num_threads), at_least(0)),
      number<Config>("ddp_bucket_mb", AT(ddp_bucket_mb), Range{0.0, std::nullopt, true}),
      {"gradient_checkpointing.policy", recompute_policy, true, same_as<Config>(AT(auto_plan.enabled))},
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
      {"type", stream_type, true, same_as<S>(AT(type))},
      string_list<S>("filenames", AT(filenames)),
      string_list<S>("source", AT(source)),
      string_list<S>("source_exclude", AT(source_exclude)),
      string_list<S>("target", AT(target)),
      string_list<S>("target_exclude", AT(target_exclude)),
      number<S>("loss_weight", AT(loss_weight), at_least(0), false),
      {"masking_rate", stream_masking_rate, false, same_as<S>(AT(masking_rate))},
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

}  // namespace wg::cfg
