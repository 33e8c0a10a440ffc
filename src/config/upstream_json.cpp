// The run's configuration as WeatherGenerator saves it beside its weights
// (model_<run_id>_<tag>.json: its merged config as JSON, the streams as a
// list of their settings with a `name`), so that upstream's
// load_run_config reads a run of this trainer.
#include <nlohmann/json.hpp>
#include <set>

#include "config/decode.h"
#include "config/upstream_json.h"

namespace wg::cfg {

namespace {

// A YAML value as the JSON value OmegaConf would hold: plain scalars become
// null, booleans, integers or numbers where they read as such; quoted ones
// stay strings.
nlohmann::json to_json(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return nullptr;
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& e : n) a.push_back(to_json(e));
    return a;
  }
  if (n.IsMap()) {  // YAML merge keys expanded, the first of a key kept (as flatten reads them)
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [key, value] : map_entries(n).entries)
      if (!o.contains(key.Scalar())) o[key.Scalar()] = to_json(value);
    return o;
  }
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted in the YAML
  if (s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  // YAML 1.1's booleans, as PyYAML (under OmegaConf) and yaml-cpp read them
  static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  if (yes.count(s)) return true;
  if (no.count(s)) return false;
  if (const auto i = as_int(n)) return *i;
  if (const auto d = as_number(n)) return *d;
  return s;
}

}  // namespace

std::string upstream_config_json(const Tree& tree, const std::vector<std::pair<std::string, YAML::Node>>& streams) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [path, leaf] : tree.leaves()) {
    nlohmann::json* at = &j;
    for (size_t start = 0;;) {
      const size_t dot = path.find('.', start);
      const std::string name = path.substr(start, dot - start);
      if (dot == std::string::npos) {
        (*at)[name] = empty_map_like(leaf.value) && leaf.value.IsMap() ? nlohmann::json::object() : to_json(leaf.value);
        break;
      }
      at = &(*at)[name];
      start = dot + 1;
    }
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, settings] : streams) {
    nlohmann::json s = to_json(settings);
    s["name"] = name;
    list.push_back(std::move(s));
  }
  j["streams"] = std::move(list);
  return j.dump();
}

}  // namespace wg::cfg
