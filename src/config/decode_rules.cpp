// The run's per-key rules (see decode_rules.h): the keys of the run's
// configuration, with their special parsers. The builders by value type are
// in rule_builders.h; a stream entry's keys in stream_rules.cpp.
#include "config/decode_rules.h"
#include "config/rule_builders.h"

#include <algorithm>
#include <cctype>
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

using namespace rules;

namespace {

Error orientation(const YAML::Node& n, Config& c) {
  if (n.IsScalar() && n.Scalar() == "channels") return c.embed_orientation = "channels", std::nullopt;
  if (n.IsScalar() && n.Scalar() == "tokens")
    return std::string("is 'tokens', WeatherGenerator's other orientation, which this trainer does not "
                       "support; use 'channels'");
  return "must be 'channels' (the only orientation supported here), " + got(n);
}

Error decoder_type(const YAML::Node& n, Config& c) {
  const std::string v = n.IsScalar() ? n.Scalar() : "";
  if (v == "PerceiverIOCoordConditioning") return c.decoder_type = v, std::nullopt;
  if (v == "PerceiverIO" || v == "AdaLayerNormConditioning" || v == "CrossAttentionConditioning" ||
      v == "CrossAttentionAdaNormConditioning")
    return "is '" + v + "', one of WeatherGenerator's other decoders, which this trainer does not build; use "
           "PerceiverIOCoordConditioning (upstream's default)";
  return "must be PerceiverIOCoordConditioning, " + got(n);
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

// [[name, weight], ...] of a LossPhysical module.
std::function<Error(const YAML::Node&, Config&)> loss_fcts(LossConfig Config::*mode) {
  return [mode](const YAML::Node& n, Config& c) -> Error {
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
    (c.*mode).loss_fcts = terms;
    return std::nullopt;
  };
}

std::function<bool(const Config&, const Config&)> same_loss_terms(LossConfig Config::*mode) {
  return [mode](const Config& a, const Config& b) {
    const auto &x = (a.*mode).loss_fcts, &y = (b.*mode).loss_fcts;
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].name != y[i].name || x[i].weight != y[i].weight) return false;
    return true;
  };
}

Error norm_type(const YAML::Node& n, Config& c) {
  if (n.IsScalar() && n.Scalar() == "LayerNorm") return c.norm_type = "LayerNorm", std::nullopt;
  if (n.IsScalar() && n.Scalar() == "RMSNorm")
    return std::string("is RMSNorm, which this trainer does not build yet (where upstream puts its weights is not "
                       "specified); use LayerNorm");
  return "must be LayerNorm, " + got(n);
}

Error forecast_policy(const YAML::Node& n, Config& c) {
  if (n.IsNull() || (n.IsScalar() && (n.Scalar() == "null" || n.Scalar() == "~" || n.Scalar().empty())))
    return c.forecast_policy = "", std::nullopt;
  if (n.IsScalar() && (n.Scalar() == "fixed" || n.Scalar() == "sequential")) return c.forecast_policy = n.Scalar(), std::nullopt;
  return "must be null, fixed or sequential (the random policies are not supported here), " + got(n);
}

// [gamma_decay, gamma] or null.
Error timestep_weight(const YAML::Node& n, Config& c) {
  if (n.IsNull()) return c.timestep_weight = "", std::nullopt;
  const auto gamma = n.IsSequence() && n.size() == 2 ? as_number(n[1]) : std::nullopt;
  if (!gamma || !n[0].IsScalar() || n[0].Scalar() != "gamma_decay" || *gamma <= 0)
    return "must be null or [gamma_decay, gamma] with gamma > 0, " + got(n);
  c.timestep_weight = "gamma_decay";
  c.timestep_weight_param = *gamma;
  return std::nullopt;
}

bool same_timestep_weight(const Config& a, const Config& b) {
  return a.timestep_weight == b.timestep_weight && a.timestep_weight_param == b.timestep_weight_param;
}

const std::vector<std::string> kStrategies = {"random", "block", "healpix", "channel", "causal", "combination"};

template <class Get>
Rule<Config> strategy_list(std::string key, Get get) {
  return {std::move(key),
          [get](const YAML::Node& n, Config& c) -> Error {
            std::vector<std::string> out;
            const std::string want = "must be a list of strategies (random|block|healpix|channel|causal), ";
            if (!n.IsSequence()) return want + got(n);
            for (const auto& e : n) {
              if (!e.IsScalar() || !contains(kStrategies, e.Scalar()) || e.Scalar() == "combination")
                return want + got(n);
              out.push_back(e.Scalar());
            }
            get(c) = out;
            return std::nullopt;
          },
          true, same_as<Config>(get)};
}

// A date (UTC) in the forms WeatherGenerator takes: YYYYMMDDHHMM (its
// configs'), YYYYMMDDHHMMSS, YYYY-MM-DD HH:MM[:SS] and YYYY-MM-DDTHH:MM[:SS].
template <class Get>
Rule<Config> date(std::string key, Get get) {
  return {std::move(key),
          [get](const YAML::Node& n, Config& c) -> Error {
            const auto v = n.IsScalar() ? parse_config_date(n.Scalar()) : std::nullopt;
            if (!v)
              return "must be a date written YYYYMMDDHHMM (e.g. 197901010000), YYYYMMDDHHMMSS or "
                     "YYYY-MM-DD[T ]HH:MM[:SS], " +
                     got(n);
            get(c) = *v;
            return std::nullopt;
          },
          true, same_as<Config>(get)};
}

// A run id names a directory under run_root: one path component of safe
// characters, so `run_id: ../x` or an absolute path cannot write elsewhere.
Error run_id(const YAML::Node& n, Config& c) {
  if (!n.IsNull() && !n.IsScalar()) return "must be a string, " + got(n);
  const std::string v = n.IsNull() || is_placeholder(n) ? "" : n.Scalar();  // upstream's ???: generated
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

// An integer >= 0, or upstream's ??? (then the pipeline takes `seed`).
Error data_loader_rng_seed(const YAML::Node& n, Config& c) {
  if (is_placeholder(n)) return c.data_loader_rng_seed.reset(), std::nullopt;
  const auto v = as_int(n);
  if (!v || *v < 0) return "must be an integer >= 0, or ??? (then seed is used), " + got(n);
  c.data_loader_rng_seed = static_cast<uint64_t>(*v);
  return std::nullopt;
}

}  // namespace

#define AT(member) [](auto& c) -> auto& { return c.member; }

const std::vector<Rule<Config>>& config_rules() {
  static const std::vector<Rule<Config>> rules = {
      {"run_id", run_id, true, same_as<Config>(AT(run_id))},
      text<Config>("run_root", AT(run_root)),
      integer<Config>("seed", AT(seed), at_least(0)),
      {"data_loader_rng_seed", data_loader_rng_seed, true, same_as<Config>(AT(data_loader_rng_seed))},
      integer<Config>("healpix_level", AT(healpix_level), Range{0.0, 12.0}),
      {"embed_orientation", orientation, true, same_as<Config>(AT(embed_orientation))},
      only<Config>("embed_local_coords", AT(embed_local_coords), true),
      only<Config>("embed_centroids_local_coords", AT(embed_centroids_local_coords), false),
      choice<Config>("embed_unembed_mode", AT(embed_unembed_mode), {"block", "full"}),
      integer<Config>("embed_size_centroids", AT(embed_size_centroids), at_least(0)),
      number<Config>("embed_dropout_rate", AT(embed_dropout_rate), kRate),
      number<Config>("embed_dropout_final_rate", AT(embed_dropout_final_rate), kRate),
      number<Config>("pred_dropout_rate", AT(pred_dropout_rate), kRate),
      only<Config>("target_cell_local_prediction", AT(target_cell_local_prediction), true),
      integer<Config>("ae_local_dim_embed", AT(ae_local_dim_embed), at_least(1)),
      integer<Config>("ae_local_num_blocks", AT(ae_local_num_blocks), at_least(0)),
      integer<Config>("ae_local_num_heads", AT(ae_local_num_heads), at_least(1)),
      number<Config>("ae_local_dropout_rate", AT(ae_local_dropout_rate), kRate),
      boolean<Config>("ae_local_with_qk_lnorm", AT(ae_local_with_qk_lnorm)),
      integer<Config>("ae_local_num_queries", AT(ae_local_num_queries), at_least(1)),
      only<Config>("ae_local_queries_per_cell", AT(ae_local_queries_per_cell), false),
      integer<Config>("ae_adapter_num_heads", AT(ae_adapter_num_heads), at_least(1)),
      integer<Config>("ae_adapter_embed", AT(ae_adapter_embed), at_least(1)),
      boolean<Config>("ae_adapter_with_qk_lnorm", AT(ae_adapter_with_qk_lnorm)),
      boolean<Config>("ae_adapter_with_residual", AT(ae_adapter_with_residual)),
      number<Config>("ae_adapter_dropout_rate", AT(ae_adapter_dropout_rate), kRate),
      integer<Config>("ae_global_dim_embed", AT(ae_global_dim_embed), at_least(1)),
      integer<Config>("ae_global_num_blocks", AT(ae_global_num_blocks), at_least(0)),
      integer<Config>("ae_global_num_heads", AT(ae_global_num_heads), at_least(1)),
      number<Config>("ae_global_dropout_rate", AT(ae_global_dropout_rate), kRate),
      boolean<Config>("ae_global_with_qk_lnorm", AT(ae_global_with_qk_lnorm)),
      number<Config>("ae_global_att_dense_rate", AT(ae_global_att_dense_rate), Range{0.0, 1.0, true, false}),
      integer<Config>("ae_global_block_factor", AT(ae_global_block_factor), at_least(1)),
      integer<Config>("ae_global_mlp_hidden_factor", AT(ae_global_mlp_hidden_factor), at_least(1)),
      integer<Config>("ae_aggregation_num_blocks", AT(ae_aggregation_num_blocks), at_least(0)),
      integer<Config>("ae_aggregation_num_heads", AT(ae_aggregation_num_heads), at_least(1)),
      number<Config>("ae_aggregation_dropout_rate", AT(ae_aggregation_dropout_rate), kRate),
      boolean<Config>("ae_aggregation_with_qk_lnorm", AT(ae_aggregation_with_qk_lnorm)),
      number<Config>("ae_aggregation_att_dense_rate", AT(ae_aggregation_att_dense_rate), Range{1.0, 1.0}),
      integer<Config>("ae_aggregation_block_factor", AT(ae_aggregation_block_factor), at_least(1)),
      integer<Config>("ae_aggregation_mlp_hidden_factor", AT(ae_aggregation_mlp_hidden_factor), at_least(1)),
      {"decoder_type", decoder_type, true, same_as<Config>(AT(decoder_type))},
      only<Config>("pred_adapter_kv", AT(pred_adapter_kv), false),
      boolean<Config>("pred_self_attention", AT(pred_self_attention)),
      only<Config>("pred_dyadic_dims", AT(pred_dyadic_dims), false),
      boolean<Config>("pred_mlp_adaln", AT(pred_mlp_adaln)),
      integer<Config>("forecast_offset", AT(forecast_offset), at_least(0)),
      integer<Config>("forecast_delta_hrs", AT(forecast_delta_hrs), at_least(0)),
      integer<Config>("forecast_steps", AT(forecast_steps), at_least(0)),
      {"forecast_policy", forecast_policy, true, same_as<Config>(AT(forecast_policy))},
      number<Config>("forecast_att_dense_rate", AT(forecast_att_dense_rate), Range{0.0, 1.0, true, false}),
      integer<Config>("fe_num_blocks", AT(fe_num_blocks), at_least(0)),
      integer<Config>("fe_num_heads", AT(fe_num_heads), at_least(1)),
      number<Config>("fe_dropout_rate", AT(fe_dropout_rate), kRate),
      boolean<Config>("fe_with_qk_lnorm", AT(fe_with_qk_lnorm)),
      number<Config>("impute_latent_noise_std", AT(impute_latent_noise_std), at_least(0)),
      number<Config>("norm_eps", AT(norm_eps), Range{0.0, std::nullopt, true}),
      number<Config>("mlp_norm_eps", AT(mlp_norm_eps), Range{0.0, std::nullopt, true}),
      {"norm_type", norm_type, true, same_as<Config>(AT(norm_type))},
      boolean<Config>("with_mixed_precision", AT(with_mixed_precision)),
      boolean<Config>("with_flash_attention", AT(with_flash_attention)),
      choice<Config>("attention_dtype", AT(attention_dtype), {"bf16", "fp16", "fp32"}),
      choice<Config>("mixed_precision_dtype", AT(mixed_precision_dtype), {"bf16", "fp16", "fp32"}),
      number<Config>("latent_noise_kl_weight", AT(latent_noise_kl_weight), Range{0.0, 0.0}),
      boolean<Config>("validate_with_ema", AT(validate_with_ema)),
      number<Config>("ema_ramp_up_ratio", AT(ema_ramp_up_ratio), Range{0.0, std::nullopt, true}),
      number<Config>("ema_halflife_in_thousands", AT(ema_halflife_in_thousands), Range{0.0, std::nullopt, true}),
      choice<Config>("training_mode", AT(training_mode), {"masking", "forecast"}),
      {"timestep_weight", timestep_weight, false, same_timestep_weight},
      number<Config>("training_mode_config.losses.LossPhysical.weight", AT(training_loss.weight), at_least(0)),
      {"training_mode_config.losses.LossPhysical.loss_fcts", loss_fcts(&Config::training_loss), true,
       same_loss_terms(&Config::training_loss)},
      number<Config>("validation_mode_config.losses.LossPhysical.weight", AT(validation_loss.weight), at_least(0)),
      {"validation_mode_config.losses.LossPhysical.loss_fcts", loss_fcts(&Config::validation_loss), true,
       same_loss_terms(&Config::validation_loss)},
      text<Config>("streams_directory", AT(streams_directory)),
      integer<Config>("batch_size_per_gpu", AT(batch_size_per_gpu), at_least(1)),
      integer<Config>("batch_size_validation_per_gpu", AT(batch_size_validation_per_gpu), at_least(1)),
      number<Config>("masking_rate", AT(masking_rate), Range{0.0, 1.0}),
      boolean<Config>("masking_rate_sampling", AT(masking_rate_sampling)),
      number<Config>("sampling_rate_target", AT(sampling_rate_target), Range{0.0, 1.0, true, false}),
      choice<Config>("masking_strategy", AT(masking_strategy), kStrategies),
      strategy_list("masking_strategy_config.strategies", AT(masking_strategy_config.strategies)),
      number_list<Config>("masking_strategy_config.probabilities", AT(masking_strategy_config.probabilities)),
      integer<Config>("masking_strategy_config.hl_mask", AT(masking_strategy_config.hl_mask), at_least(0)),
      choice<Config>("masking_strategy_config.mode", AT(masking_strategy_config.mode), {"per_cell", "global"}),
      boolean<Config>("masking_strategy_config.same_strategy_per_batch",
                      AT(masking_strategy_config.same_strategy_per_batch)),
      boolean<Config>("shuffle", AT(shuffle)),
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
      choice<Config>("lr_policy_decay", AT(lr.lr_policy_decay),
                     {"constant", "linear", "cosine", "exponential", "sqrt"}),
      choice<Config>("lr_policy_cooldown", AT(lr.lr_policy_cooldown), {"linear", "cosine"}),
      choice<Config>("lr_scaling_policy", AT(lr.lr_scaling_policy), {"const", "linear", "sqrt"}),
      number<Config>("grad_clip", AT(grad_clip), at_least(0)),
      number<Config>("weight_decay", AT(weight_decay), at_least(0)),
      {"nan_policy", nan_policy, true, same_as<Config>(AT(nan_policy))},
      integer<Config>("max_consecutive_nan_skips", AT(max_consecutive_nan_skips), at_least(1)),
      choice<Config>("loss_scaling", AT(loss_scaling), {"auto", "on", "off"}),
      choice<Config>("device", AT(device), {"auto", "cpu", "cuda"}),
      integer<Config>("num_threads", AT(num_threads), at_least(0)),
      integer<Config>("cpu_keep_freed_mib", AT(cpu_keep_freed_mib), Range{0.0, 2047.0}),
      number<Config>("peak_tflops", AT(peak_tflops), Range{0.0, std::nullopt}),
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

#undef AT

}  // namespace wg::cfg
