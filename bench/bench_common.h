// What the benchmarks share: their command line (--config FILE and
// --set KEY=VALUE as for wgtrain, default config/cpu_small.yml, plus each
// benchmark's own options) and one checkpoint mode applied to every section.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "wg/config/loader.h"

namespace wg::bench {

struct Options {
  ConfigSources sources;
  std::map<std::string, std::vector<std::string>> values;  // every value of a repeatable option
  std::set<std::string> flags;

  std::string text(const std::string& name, const std::string& fallback) const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second.back();
  }
  int integer(const std::string& name, int fallback) const {
    auto it = values.find(name);
    return it == values.end() ? fallback : std::stoi(it->second.back());
  }
  std::vector<double> numbers(const std::string& name) const {
    std::vector<double> out;
    if (auto it = values.find(name); it != values.end())
      for (const auto& v : it->second) out.push_back(std::stod(v));
    return out;
  }
  bool flag(const std::string& name) const { return flags.count(name) > 0; }
};

// `valued`: options that take a value ("--steps"); `switches`: options
// without one. Throws std::invalid_argument naming an unknown option or a
// missing value.
inline Options parse_options(int argc, char** argv, const std::set<std::string>& valued,
                             const std::set<std::string>& switches = {}) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool takes_value = a == "--config" || a == "--set" || valued.count(a);
    if (!takes_value && !switches.count(a)) throw std::invalid_argument("unknown option " + a);
    if (!takes_value) {
      o.flags.insert(a);
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--config") o.sources.files.push_back(v);
    else if (a == "--set") o.sources.overrides.push_back(v);
    else o.values[a].push_back(v);
  }
  if (o.sources.files.empty()) o.sources.files.push_back(std::string(WG_SOURCE_DIR) + "/config/cpu_small.yml");
  return o;
}

// `mode` (with every_n) in every section, no block lists.
inline Config with_mode(Config c, CheckpointMode mode, int every_n) {
  for (SectionCheckpointConfig* s : {&c.gradient_checkpointing.embed, &c.gradient_checkpointing.latent,
                                     &c.gradient_checkpointing.pred}) {
    s->set = true;
    s->mode = mode;
    s->every_n = every_n;
    s->blocks.clear();
  }
  return c;
}

}  // namespace wg::bench
