// Loading a run's configuration: default_config.yml (compiled in), then each
// --config file in order, then each --set key=value, then the stream files
// of streams_directory. All problems of all sources are collected and thrown
// together as one ConfigError; nothing is defaulted silently.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "wg/config/config.h"

namespace wg {

// Every problem found, each a full sentence naming key, file and line.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

struct ConfigSources {
  std::vector<std::string> files;      // --config, in order
  std::vector<std::string> overrides;  // --set, "dotted.key=yaml value"
  bool include_defaults = true;        // start from default_config.yml
};

// A run's configuration, loaded once: the typed config and its record as
// YAML text (keys in a stable order, each leaf followed by a comment naming
// where it was set; written to the run directory, loads back on its own).
struct LoadedConfig {
  Config config;
  std::string resolved_yaml;
  // The same configuration as WeatherGenerator saves it (model_<run_id>.json:
  // JSON, the streams as a list); the run sets run_id, model_path, run_path.
  std::string upstream_json;
};

// Loads, overlays, validates; logs the warnings once. Throws ConfigError.
LoadedConfig load_run_config(const ConfigSources& sources);
// load_run_config(sources).config (tests and tools).
Config load_config(const ConfigSources& sources);
// load_run_config(sources).resolved_yaml, without logging warnings.
std::string resolved_config_yaml(const ConfigSources& sources);

// The keys whose default in Config{} (config.h) differs from their value in
// `default_text` (default_config.yml, compiled in); empty when they agree.
// A config problem in the text is returned as well.
std::vector<std::string> default_disagreements(const std::string& default_text);

// The text of config/default_config.yml as compiled into the binary.
const std::string& default_config_text();

// Nearest known key by edit distance, or "" if none is close.
std::string nearest_key(const std::string& key, const std::vector<std::string>& known);

}  // namespace wg
