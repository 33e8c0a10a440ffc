// A stream entry's per-key rules (see decode_rules.h): the keys of one
// `<NAME>: {...}` entry of a stream file, as WeatherGenerator's stream files
// write them.
#include <algorithm>
#include <cctype>

#include "config/rule_builders.h"

namespace wg::cfg {

using namespace rules;

namespace {

Error stream_type(const YAML::Node& n, StreamConfig& s) {
  if (n.IsScalar() && (n.Scalar() == "synthetic" || n.Scalar() == "anemoi" || n.Scalar() == "obs"))
    return s.type = n.Scalar(), std::nullopt;
  if (n.IsScalar() && !n.Scalar().empty())  // fesom, or a plug-in reader of upstream's (cams, icon, ...)
    return "is '" + n.Scalar() + "', which needs WeatherGenerator's " + n.Scalar() +
           " reader; this trainer reads anemoi, obs and synthetic streams only";
  return "must be one of anemoi|obs|synthetic, " + got(n);
}

// A per-stream rate: -1 (unset: `what`) or a number in [0, 1].
Error stream_rate(const YAML::Node& n, double& out, const char* what) {
  const auto v = as_number(n);
  if (!v || !(*v == -1.0 || (*v >= 0.0 && *v <= 1.0)))
    return std::string("must be -1 (") + what + ") or a number in [0, 1], " + got(n);
  out = *v;
  return std::nullopt;
}

// The final activation of a prediction head: a torch.nn activation name, any case.
Error final_activation(const YAML::Node& n, StreamConfig& s) {
  static const std::vector<std::string> names = {"identity", "tanh", "sigmoid", "gelu", "relu", "leakyrelu", "elu",
                                                 "selu", "softplus", "silu", "swish", "softmax", "logsoftmax"};
  std::string v = n.IsScalar() ? n.Scalar() : "";
  std::string low = v;
  std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (!contains(names, low)) return "must be an activation (" + join(names, "|") + ", any case), " + got(n);
  s.pred_head.final_activation = v;
  return std::nullopt;
}

Error location_weight(const YAML::Node& n, StreamConfig& s) {
  if (n.IsNull()) return s.location_weight = "", std::nullopt;
  if (n.IsScalar() && n.Scalar() == "cosine_latitude") return s.location_weight = n.Scalar(), std::nullopt;
  return "must be null or cosine_latitude, " + got(n);
}

Error stream_masking_rate(const YAML::Node& n, StreamConfig& s) {
  return stream_rate(n, s.masking_rate, "unset; never used, as upstream");
}
Error stream_masking_rate_none(const YAML::Node& n, StreamConfig& s) {
  return stream_rate(n, s.masking_rate_none, "unset; never used, as upstream");
}
Error stream_sampling_rate_target(const YAML::Node& n, StreamConfig& s) {
  const Error e = stream_rate(n, s.sampling_rate_target, "use the global sampling_rate_target");
  if (!e && s.sampling_rate_target == 0.0) return "must be -1 or a number in (0, 1], " + got(n);
  return e;
}

}  // namespace

#define AT(member) [](auto& c) -> auto& { return c.member; }

// `type` comes first: the synthetic.* keys are required only for a valid type.
const std::vector<Rule<StreamConfig>>& stream_rules() {
  using S = StreamConfig;
  static const std::vector<Rule<S>> rules = {
      {"type", stream_type, true, same_as<S>(AT(type))},
      string_list<S>("filenames", AT(filenames)),
      optional_string_list<S>("source", AT(source)),
      string_list<S>("source_exclude", AT(source_exclude)),
      optional_string_list<S>("target", AT(target)),
      string_list<S>("target_exclude", AT(target_exclude)),
      number<S>("loss_weight", AT(loss_weight), at_least(0), false),
      {"masking_rate", stream_masking_rate, false, same_as<S>(AT(masking_rate))},
      {"masking_rate_none", stream_masking_rate_none, false, same_as<S>(AT(masking_rate_none))},
      integer<S>("token_size", AT(token_size), at_least(1)),
      boolean<S>("tokenize_spacetime", AT(tokenize_spacetime), false),
      boolean<S>("diagnostic", AT(diagnostic), false),
      {"sampling_rate_target", stream_sampling_rate_target, false, same_as<S>(AT(sampling_rate_target))},
      integer<S>("max_num_targets", AT(max_num_targets), Range{}, false),
      {"location_weight", location_weight, false, same_as<S>(AT(location_weight))},
      optional_text<S>("frequency", AT(frequency)),
      optional_text<S>("base_datetime", AT(base_datetime)),
      choice<S>("embed.net", AT(embed.net), {"transformer"}, false),
      integer<S>("embed.num_tokens", AT(embed.num_tokens), Range{1.0, 1.0}),
      integer<S>("embed.num_heads", AT(embed.num_heads), at_least(1)),
      integer<S>("embed.dim_embed", AT(embed.dim_embed), at_least(1)),
      integer<S>("embed.num_blocks", AT(embed.num_blocks), at_least(0)),
      choice<S>("embed_target_coords.net", AT(embed_target_coords.net), {"linear"}, false),
      integer<S>("embed_target_coords.dim_embed", AT(embed_target_coords.dim_embed), at_least(1)),
      choice<S>("target_readout.type", AT(target_readout.type), {"obs_value"}, false),
      integer<S>("target_readout.num_layers", AT(target_readout.num_layers), at_least(1)),
      integer<S>("target_readout.num_heads", AT(target_readout.num_heads), at_least(1)),
      integer<S>("target_readout.mlp_hidden_factor", AT(target_readout.mlp_hidden_factor), at_least(1), false),
      integer<S>("target_readout.dim_head_proj", AT(target_readout.dim_head_proj), at_least(0), false),
      number<S>("target_readout.softcap", AT(target_readout.softcap), Range{0.0, 0.0}, false),
      integer<S>("pred_head.ens_size", AT(pred_head.ens_size), at_least(1)),
      integer<S>("pred_head.num_layers", AT(pred_head.num_layers), at_least(1)),
      {"pred_head.final_activation", final_activation, false, same_as<S>(AT(pred_head.final_activation))},
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
