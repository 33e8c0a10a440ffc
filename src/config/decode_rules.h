// Private to the config loader: one typed rule per key (type, range, enum),
// for the run's keys (config_rules) and a stream entry's (stream_rules).
// Each rule decodes its key's YAML value into the struct and can tell
// whether two structs agree on that key (for the check that the struct
// defaults equal default_config.yml's).
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "wg/config/config.h"

namespace wg::cfg {

using Error = std::optional<std::string>;  // nothing: the value was taken

template <class S>
struct Rule {
  std::string key;
  std::function<Error(const YAML::Node&, S&)> apply;
  bool required = true;
  std::function<bool(const S&, const S&)> same;  // do two structs hold the same value for `key`?
};

const std::vector<Rule<Config>>& config_rules();
const std::vector<Rule<StreamConfig>>& stream_rules();

bool contains(const std::vector<std::string>& v, const std::string& s);
std::string join(const std::vector<std::string>& v, const char* sep);

}  // namespace wg::cfg
