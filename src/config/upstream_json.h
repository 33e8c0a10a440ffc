// Private to the config loader: the run's configuration as WeatherGenerator's
// JSON (see upstream_json.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/yaml_tree.h"

namespace wg::cfg {

// `tree`: the merged configuration; `streams`: each stream's name and its
// settings as read from its stream file.
std::string upstream_config_json(const Tree& tree, const std::vector<std::pair<std::string, YAML::Node>>& streams);

}  // namespace wg::cfg
