// WeatherGenerator's keys that this trainer accepts and does not use, the
// feature each would need, and upstream's "???" placeholder (see
// docs/weathergenerator.md). Upstream's values are those of the compiled-in
// default_config.yml, which carries every upstream key.
#include <spdlog/spdlog.h>

#include <map>

#include "config/decode.h"
#include "config/decode_rules.h"

namespace wg::cfg {

const std::vector<UnusedKey>& unused_upstream_keys() {
  static const char* const kLatentNoise = "the variational latent noise (latent_noise_kl_weight > 0) is not implemented";
  static const char* const kBookkeeping = "continued runs use this trainer's checkpoints/ and resume instead";
  static const std::vector<UnusedKey> keys = {
      {"compile_model", "torch.compile has no counterpart in this C++ trainer"},
      {"with_fsdp", "FSDP sharding is not implemented: every rank holds the whole model", "False"},
      {"latent_noise_gamma", kLatentNoise},
      {"latent_noise_saturate_encodings", kLatentNoise},
      {"latent_noise_use_additive_noise", kLatentNoise},
      {"latent_noise_deterministic_latents", kLatentNoise},
      {"freeze_modules", "freezing modules is not implemented: every parameter trains"},
      {"nn_module", "the layers are this trainer's own; Transformer Engine is not used"},
      {"log_grad_norms", "per-parameter gradient norms are not logged"},
      {"input_window_steps", "only one input window is implemented"},
      {"val_initial", "no validation pass runs before the first step"},
      {"log_validation", "validation output is not written"},
      {"streams_output", "validation output is not written"},
      {"istep", kBookkeeping},
      {"run_history", kBookkeeping},
      {"desc", "it is kept in config.yml only"},
      {"wgtags", "MLflow is not used; the tags are kept in config.yml only"},
  };
  return keys;
}

std::vector<std::string> unused_upstream_key_names() {
  std::vector<std::string> out;
  for (const auto& k : unused_upstream_keys()) out.push_back(k.key);
  return out;
}

const UnusedKey* unused_key_of(const std::string& path) {
  const std::string top = path.substr(0, path.find('.'));
  for (const auto& k : unused_upstream_keys())
    if (top == k.key) return &k;
  return nullptr;
}

namespace {

// Scalars compare as booleans, then numbers, then text (False == false, 5 == 5.0).
bool same_value(const YAML::Node& a, const YAML::Node& b) {
  if (a.IsScalar() && b.IsScalar()) {
    if (const auto x = as_bool(a), y = as_bool(b); x && y) return *x == *y;
    if (const auto x = as_number(a), y = as_number(b); x && y) return *x == *y;
  }
  return render(a) == render(b);
}

}  // namespace

bool is_placeholder(const YAML::Node& n) { return n.IsScalar() && n.Scalar() == kPlaceholder; }

void check_placeholders(const Tree& tree, Problems& problems, std::set<std::string>& bad) {
  for (const auto& [path, leaf] : tree.leaves()) {
    if (!is_placeholder(leaf.value) || path == "run_id" || path == "data_loader_rng_seed") continue;
    problems.push_back(leaf.origin.str() + ": " + path + " is ???, upstream's placeholder for a value that must be "
                       "set: set it in a config file or with --set " + path + "=...");
    bad.insert(path);
  }
}

std::string quoted(const YAML::Node& n) { return n.IsScalar() ? "'" + n.Scalar() + "'" : render(n); }

void report_unused_keys(const Tree& merged, const Tree& defaults, bool warn) {
  if (!warn) return;
  std::vector<std::string> given;  // by a config file or --set
  std::vector<std::string> differs;
  for (const auto& [path, leaf] : merged.leaves()) {
    const UnusedKey* k = unused_key_of(path);
    if (!k || leaf.kind == SourceKind::Default) continue;
    if (!contains(given, k->key)) given.push_back(k->key);
    const Leaf* was = defaults.find(path);
    if (was && same_value(was->value, leaf.value)) continue;
    if (k->here && same_value(YAML::Node(k->here), leaf.value)) continue;  // what this trainer does anyway
    differs.push_back(leaf.origin.str() + ": " + path + " is " + quoted(leaf.value) + " (upstream's default: " +
                      (was ? quoted(was->value) : std::string("not set")) + ") and not used here: " + k->note);
  }
  if (!given.empty())
    spdlog::warn("{} of WeatherGenerator's keys are accepted and not used here (marked 'not used' in the run's "
                 "config.yml; see docs/weathergenerator.md): {}",
                 given.size(), join(given, ", "));
  for (const auto& msg : differs) spdlog::warn("{}", msg);
}

}  // namespace wg::cfg
