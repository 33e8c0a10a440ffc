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

// Loads, overlays, validates. Throws ConfigError.
Config load_config(const ConfigSources& sources);

// The merged configuration as YAML text (keys in a stable order, each leaf
// followed by a comment naming where it was set). Written to the run dir.
std::string resolved_config_yaml(const ConfigSources& sources);

// The text of config/default_config.yml as compiled into the binary.
const std::string& default_config_text();

// Nearest known key by edit distance, or "" if none is close.
std::string nearest_key(const std::string& key, const std::vector<std::string>& known);

}  // namespace wg
