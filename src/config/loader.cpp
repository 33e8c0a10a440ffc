// The public entry points: gathers the sources (compiled-in defaults, --config
// files, --set overrides), overlays them, decodes and validates, loads the
// stream files of streams_directory, and throws every problem at once.
#include "wg/config/loader.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include <spdlog/spdlog.h>

#include "config/decode.h"
#include "config/decode_rules.h"
#include "config/upstream_json.h"
#include "config/yaml_tree.h"

#ifndef WG_CONFIG_DIR
#define WG_CONFIG_DIR "config"
#endif

namespace wg {
namespace fs = std::filesystem;

namespace {

std::string error_text(const std::vector<std::string>& problems) {
  std::string text = "invalid configuration (" + std::to_string(problems.size()) +
                     (problems.size() == 1 ? " problem):" : " problems):");
  for (const auto& p : problems) text += "\n" + p;
  return text;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

ConfigError::ConfigError(std::vector<std::string> problems)
    : std::runtime_error(error_text(problems)), problems_(std::move(problems)) {}

std::string nearest_key(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& k : known) {
    const size_t d = edit_distance(key, k);
    if (d < best_distance) best_distance = d, best = k;
  }
  return best_distance <= std::max<size_t>(2, key.size() / 3) ? best : "";
}

namespace cfg {
namespace {

constexpr const char* kDefaultSource = "default_config.yml";

struct Loaded {
  Tree tree;
  Config config;
  std::vector<std::pair<std::string, YAML::Node>> stream_settings;  // as read, for upstream's JSON
};

// A relative path set in a config file is taken relative to that file; for
// a key of WeatherGenerator's (`upstream_key`) only when it exists there
// (this project's files), else relative to the working directory, as
// WeatherGenerator takes it; --set: the working directory; the
// compiled-in default: WG_CONFIG_DIR. `rule` says which applied, for the log.
struct ResolvedPath {
  fs::path path;
  std::string rule;
};

ResolvedPath resolve_path(const Leaf* leaf, const std::string& value, bool upstream_key,
                          const std::function<bool(const fs::path&)>& found = {}) {
  const auto absolute = [](const fs::path& p) {
    fs::path a = fs::absolute(p).lexically_normal();
    return a.has_filename() || a == a.root_path() ? a : a.parent_path();  // "dir/" -> "dir"
  };
  if (fs::path(value).is_absolute()) return {absolute(value), "absolute"};
  if (leaf && leaf->kind == SourceKind::Default)
    return {absolute(fs::path(WG_CONFIG_DIR) / value), "relative to the built-in config directory"};
  if (leaf && leaf->kind == SourceKind::File) {
    const fs::path beside = absolute(fs::path(leaf->origin.source).parent_path() / value);
    std::error_code ec;
    if (!upstream_key || (found ? found(beside) : fs::exists(beside, ec)))
      return {beside, "relative to " + leaf->origin.source};
    return {absolute(value), "relative to the working directory as WeatherGenerator resolves it; not found "
                             "relative to " + leaf->origin.source};
  }
  return {absolute(value), "relative to the working directory"};
}

// data_path (this project's key): relative to the file that sets it; when empty, the environment variable
// WG_DATA_PATH (relative to the current directory); still empty: relative
// filenames cannot be resolved, which the data layer reports when a stream
// needs it.
void resolve_data_path(const Tree& tree, Config& cfg, bool log) {
  if (cfg.data_path.empty()) {
    const char* env = std::getenv("WG_DATA_PATH");
    if (env && *env) cfg.data_path = fs::absolute(env).lexically_normal().string();
    return;
  }
  const ResolvedPath r = resolve_path(tree.find("data_path"), cfg.data_path, false);
  if (log && r.path.string() != cfg.data_path) spdlog::info("data_path {}: {} ({})", cfg.data_path, r.path.string(), r.rule);
  cfg.data_path = r.path.string();
}

// WeatherGenerator's renamed stream directories: a streams_directory named
// on the left that does not exist is looked for under the name on the right.
const std::map<std::string, std::string>& streams_history() {
  static const std::map<std::string, std::string> h = {{"streams_anemoi", "era5_1deg"},
                                                       {"streams_mixed", "era5_nppatms_synop"},
                                                       {"streams_ocean", "fesom"},
                                                       {"streams_icon", "icon"},
                                                       {"streams_mixed_experimental", "cerra_seviri"}};
  return h;
}

// The stream files under `dir`, recursively, as upstream finds them (*.yml;
// here also *.yaml), leaving out names starting with '.' or '#' (editor
// files), in path order.
std::vector<fs::path> stream_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const auto name = it->path().filename().string();
    const auto ext = it->path().extension();
    if (it->is_regular_file(ec) && (ext == ".yml" || ext == ".yaml") && name[0] != '.' && name[0] != '#')
      files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// One stream entry: its settings checked and decoded, and kept as read.
void add_stream(const std::string& name, const Origin& origin, const YAML::Node& settings_node, Config& cfg,
                Loaded& out, Problems& problems) {
  Tree settings;
  flatten(settings_node, "", origin.source, SourceKind::File, {}, settings, problems);
  check_keys(settings, stream_schema(), " in stream '" + name + "'", problems);
  cfg.streams.push_back(decode_stream(name, origin, settings, problems));
  out.stream_settings.emplace_back(name, settings_node);
}

void load_streams(const Tree& tree, Config& cfg, bool log, Loaded& out, Problems& problems) {
  const Leaf* leaf = tree.find("streams_directory");
  std::error_code ec;
  // `dir`, or the directory its WeatherGenerator renames lead to; `tried` lists them.
  const auto follow = [&ec](fs::path dir, std::vector<std::string>* tried) {
    while (!fs::is_directory(dir, ec) && streams_history().count(dir.filename().string())) {
      dir = dir.parent_path() / streams_history().at(dir.filename().string());
      if (tried) tried->push_back(dir.string());
    }
    return dir;
  };
  const ResolvedPath resolved = resolve_path(leaf, cfg.streams_directory, true, [&](const fs::path& p) {
    return fs::is_directory(follow(p, nullptr), ec);
  });
  const std::string set_at = leaf ? leaf->origin.str() : std::string("the built-in value");
  std::vector<std::string> tried = {resolved.path.string()};
  const fs::path dir = follow(resolved.path, &tried);
  if (!fs::is_directory(dir, ec)) {
    problems.push_back(set_at + ": streams_directory '" + join(tried, "', nor its renamed '") +
                       "' does not exist or is not a directory (" + resolved.rule + ")");
    return;
  }
  if (log) {
    spdlog::info("streams_directory {}: {} ({})", cfg.streams_directory, dir.string(), resolved.rule);
    if (tried.size() > 1)
      spdlog::warn("{}: streams_directory {} does not exist; using {}, its new name in WeatherGenerator",
                   set_at, tried.front(), dir.string());
  }
  cfg.streams_directory = dir.string();
  const std::vector<fs::path> files = stream_files(dir);
  if (files.empty()) {
    problems.push_back(set_at + ": streams_directory '" + dir.string() +
                       "' contains no stream files (*.yml, *.yaml)");
    return;
  }
  const size_t problems_before = problems.size();
  std::map<std::string, Origin> seen;
  for (const auto& file : files) {
    const std::string path = file.string();
    const auto doc = read_yaml_file(path, problems);
    if (doc && doc->IsNull() && log) spdlog::warn("stream file {} is empty: skipped", path);
    if (!doc || doc->IsNull()) continue;
    if (!doc->IsMap()) {
      problems.push_back(path + ":" + std::to_string(doc->Mark().line + 1) +
                         ": a stream file must map stream names to their settings, " + got(*doc));
      continue;
    }
    for (const auto& kv : *doc) {
      const Origin origin{path, kv.first.Mark().line + 1};
      if (!kv.first.IsScalar()) {
        problems.push_back(origin.str() + ": stream names must be plain names, got " + render(kv.first));
        continue;
      }
      const std::string name = kv.first.Scalar();
      if (auto it = seen.find(name); it != seen.end()) {
        problems.push_back(origin.str() + (it->second.source == path ? ": duplicate key '" : ": stream '") +
                           name + (it->second.source == path ? "' (first set at line " +
                                                                   std::to_string(it->second.line) + ")"
                                                             : "' is defined twice (first at " +
                                                                   it->second.str() + ")"));
        continue;
      }
      seen[name] = origin;
      if (!kv.second.IsMap()) {
        problems.push_back(origin.str() + ": stream '" + name + "' must be a map of settings, " +
                           got(kv.second));
        continue;
      }
      add_stream(name, origin, kv.second, cfg, out, problems);
    }
  }
  if (cfg.streams.empty() && problems.size() == problems_before)
    problems.push_back(set_at + ": streams_directory '" + dir.string() + "' defines no streams");
}

// A saved run configuration: WeatherGenerator's model_<run_id>_<tag>.json
// (or this trainer's, written beside its .chkpt), taken by its extension.
bool is_saved_run_config(const std::string& file) { return fs::path(file).extension() == ".json"; }

// Its keys that this trainer knows go into `known` (but run_id: the run
// started from it is a new run unless --set run_id says otherwise); the others (upstream's
// runtime and private-config keys: rank, with_ddp, data_path_anemoi, ...)
// are named in one log line; its `streams` list is kept for
// load_saved_streams.
void split_saved_run_config(const Tree& saved, const std::string& file, bool log, Tree& known,
                            std::optional<Leaf>& streams) {
  std::vector<std::string> ignored;
  for (const auto& [path, leaf] : saved.leaves()) {
    if (path == "streams") {
      streams.emplace(leaf);
      continue;
    }
    if (path == "run_id") continue;  // a new run gets a new id, as upstream's --from_run_id
    Tree one;
    one.set(path, leaf);
    Problems unknown;
    check_keys(one, config_schema(), "", unknown);
    if (unknown.empty()) {
      known.set(path, leaf);
    } else {
      const std::string top = path.substr(0, path.find('.'));
      if (!contains(ignored, top)) ignored.push_back(top);
    }
  }
  if (log && !ignored.empty())
    spdlog::info("{}: a saved run configuration; {} of its keys are not this trainer's and are ignored: {}", file,
                 ignored.size(), join(ignored, ", "));
}

// Keys upstream's data sampler adds to each stream of the configuration it
// then saves (multi_stream_data_sampler.py, "MODIFIES config"): what its
// readers resolved, not settings. This trainer resolves them again.
const std::vector<std::string>& resolved_stream_keys() {
  static const std::vector<std::string> keys = {"train_source_channels", "train_target_channels", "val_source_channels",
                                                "val_target_channels", "target_channel_weights"};
  return keys;
}

// The streams of a saved run configuration: a list of settings maps, each
// with its `name`.
void load_saved_streams(const Leaf& leaf, Config& cfg, bool log, Loaded& out, Problems& problems) {
  const std::string at = leaf.origin.str();
  if (!leaf.value.IsSequence() || leaf.value.size() == 0) {
    problems.push_back(at + ": streams must be a non-empty list of stream settings, " + got(leaf.value));
    return;
  }
  cfg.streams_directory.clear();
  std::map<std::string, bool> seen;
  std::vector<std::string> resolved;
  for (const auto& entry : leaf.value) {
    const YAML::Node name = entry.IsMap() ? entry["name"] : YAML::Node();
    if (!name.IsDefined() || !name.IsScalar() || name.Scalar().empty()) {
      problems.push_back(at + ": each entry of streams must be a map of settings with a name, got " + render(entry));
      continue;
    }
    if (seen[name.Scalar()]) {
      problems.push_back(at + ": stream '" + name.Scalar() + "' is defined twice");
      continue;
    }
    seen[name.Scalar()] = true;
    YAML::Node settings(YAML::NodeType::Map);
    for (const auto& kv : entry) {
      if (kv.first.Scalar() == "name") continue;
      if (contains(resolved_stream_keys(), kv.first.Scalar())) {
        if (!contains(resolved, kv.first.Scalar())) resolved.push_back(kv.first.Scalar());
        continue;
      }
      settings[kv.first] = kv.second;
    }
    add_stream(name.Scalar(), leaf.origin, settings, cfg, out, problems);
  }
  if (log && !resolved.empty())
    spdlog::info("{}: the streams' {} (what upstream's readers resolved) are ignored: resolved again here", at,
                 join(resolved, ", "));
}

Loaded load_all(const ConfigSources& sources, bool warn) {
  Problems problems;
  Loaded out;
  const auto add = [&](const Tree& source) {
    check_keys(source, config_schema(), "", problems);
    out.tree.overlay(source);
  };
  Tree defaults;
  if (auto doc = parse_yaml(default_config_text(), kDefaultSource, problems)) {
    defaults = flatten_document(*doc, kDefaultSource, SourceKind::Default, config_aliases(), problems);
    if (sources.include_defaults) {
      check_required(defaults, config_schema(), kDefaultSource, problems);
      add(defaults);
    }
  }
  std::optional<Leaf> saved_streams;  // from a saved run configuration (.json)
  for (const auto& file : sources.files) {
    auto doc = read_yaml_file(file, problems);
    if (!doc) continue;
    Tree tree = flatten_document(*doc, file, SourceKind::File, config_aliases(), problems);
    if (!is_saved_run_config(file)) {
      add(tree);
      continue;
    }
    Tree known;
    std::optional<Leaf> streams;
    split_saved_run_config(tree, file, warn, known, streams);
    add(known);
    saved_streams.reset();
    if (streams) saved_streams.emplace(*streams);
  }
  for (const auto& arg : sources.overrides) add(parse_override(arg, config_aliases(), problems));

  const auto bad = decode_config(out.tree, out.config, warn, problems);
  const Leaf* dir_leaf = out.tree.find("streams_directory");
  // The saved streams, unless a later file or --set names a streams_directory.
  if (saved_streams && !(dir_leaf && dir_leaf->origin.source != saved_streams->origin.source &&
                         dir_leaf->kind != SourceKind::Default))
    load_saved_streams(*saved_streams, out.config, warn, out, problems);
  else if (!bad.count("streams_directory"))
    load_streams(out.tree, out.config, warn, out, problems);
  if (!bad.count("data_path")) resolve_data_path(out.tree, out.config, warn);
  check_with_streams(out.tree, out.config, bad, problems);
  if (!problems.empty()) throw ConfigError(std::move(problems));
  report_unused_keys(out.tree, defaults, warn);
  return out;
}

// One stream as YAML (for the commented record in the resolved config).
std::string stream_yaml(const StreamConfig& s) {
  YAML::Emitter out;
  out.SetDoublePrecision(15);
  const auto list = [&](const char* key, const std::vector<std::string>& v) {
    out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& x : v) out << x;
    out << YAML::EndSeq;
  };
  out << YAML::BeginMap << YAML::Key << s.name << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "type" << YAML::Value << s.type;
  list("filenames", s.filenames);
  const auto optional_list = [&](const char* key, const std::optional<std::vector<std::string>>& v) {
    if (v) return list(key, *v);
    out << YAML::Key << key << YAML::Value << YAML::Null;  // every channel, not [] (none)
  };
  optional_list("source", s.source);
  list("source_exclude", s.source_exclude);
  optional_list("target", s.target);
  list("target_exclude", s.target_exclude);
  out << YAML::Key << "channel_weights" << YAML::Value << YAML::Flow << YAML::BeginMap;
  for (const auto& [channel, w] : s.channel_weights) out << YAML::Key << channel << YAML::Value << w;
  out << YAML::EndMap;
  out << YAML::Key << "loss_weight" << YAML::Value << s.loss_weight;
  out << YAML::Key << "masking_rate" << YAML::Value << s.masking_rate;
  out << YAML::Key << "masking_rate_none" << YAML::Value << s.masking_rate_none;
  out << YAML::Key << "token_size" << YAML::Value << s.token_size;
  out << YAML::Key << "tokenize_spacetime" << YAML::Value << s.tokenize_spacetime;
  out << YAML::Key << "diagnostic" << YAML::Value << s.diagnostic;
  out << YAML::Key << "sampling_rate_target" << YAML::Value << s.sampling_rate_target;
  out << YAML::Key << "max_num_targets" << YAML::Value << s.max_num_targets;
  out << YAML::Key << "frequency" << YAML::Value << s.frequency;
  out << YAML::Key << "base_datetime" << YAML::Value << s.base_datetime;
  out << YAML::Key << "embed" << YAML::Value << YAML::BeginMap << YAML::Key << "net" << YAML::Value
      << s.embed.net << YAML::Key << "num_tokens" << YAML::Value << s.embed.num_tokens << YAML::Key
      << "num_heads" << YAML::Value << s.embed.num_heads << YAML::Key << "dim_embed" << YAML::Value
      << s.embed.dim_embed << YAML::Key << "num_blocks" << YAML::Value << s.embed.num_blocks
      << YAML::EndMap;
  out << YAML::Key << "embed_target_coords" << YAML::Value << YAML::BeginMap << YAML::Key << "net" << YAML::Value
      << s.embed_target_coords.net << YAML::Key << "dim_embed" << YAML::Value << s.embed_target_coords.dim_embed
      << YAML::EndMap;
  out << YAML::Key << "target_readout" << YAML::Value << YAML::BeginMap << YAML::Key << "type" << YAML::Value
      << s.target_readout.type << YAML::Key << "num_layers" << YAML::Value << s.target_readout.num_layers
      << YAML::Key << "num_heads" << YAML::Value << s.target_readout.num_heads << YAML::EndMap;
  out << YAML::Key << "pred_head" << YAML::Value << YAML::BeginMap << YAML::Key << "ens_size" << YAML::Value
      << s.pred_head.ens_size << YAML::Key << "num_layers" << YAML::Value << s.pred_head.num_layers << YAML::EndMap;
  const auto& y = s.synthetic;
  out << YAML::Key << "synthetic" << YAML::Value << YAML::BeginMap << YAML::Key << "num_channels"
      << YAML::Value << y.num_channels << YAML::Key << "grid_lat" << YAML::Value << y.grid_lat
      << YAML::Key << "grid_lon" << YAML::Value << y.grid_lon << YAML::Key << "num_waves" << YAML::Value
      << y.num_waves << YAML::Key << "noise" << YAML::Value << y.noise << YAML::Key
      << "time_step_hours" << YAML::Value << y.time_step_hours << YAML::EndMap;
  out << YAML::EndMap << YAML::EndMap;
  return out.c_str();
}

std::string record_of(Loaded& loaded) {
  const Config& c = loaded.config;
  // streams_directory is written resolved, so the file reloads from anywhere.
  if (!loaded.tree.find("streams_directory"))
    loaded.tree.set("streams_directory",
                    Leaf{YAML::Node(c.streams_directory), Origin{"the built-in value", 0}, SourceKind::File,
                         "streams_directory"});
  std::map<std::string, EmitOverride> overrides = {{"streams_directory", {c.streams_directory, " (resolved)"}},
                                                   {"data_path", {c.data_path, " (resolved)"}}};
  for (const auto& [path, leaf] : loaded.tree.leaves())
    if (unused_key_of(path)) overrides[path].comment = " (not used)";
  // A section boolean the structured form overrides is left out (it has no effect).
  for (const auto& sec : recompute_sections())
    if (!sec.flag.empty() && (c.gradient_checkpointing.*sec.field).set) overrides[sec.flag].omit = true;
  std::ostringstream text;
  text << "# Resolved configuration: every key, with where it was set.\n"
       << "# Loads back on its own (without default_config.yml).\n"
       << emit_tree(loaded.tree, overrides)
       << "\n# ---- streams, as loaded from streams_directory (read from there again on reload) ----\n";
  for (const auto& s : c.streams) {
    text << "# " << s.origin.str() << "\n";
    std::istringstream lines(stream_yaml(s));
    for (std::string line; std::getline(lines, line);) text << "# " << line << "\n";
  }
  return text.str();
}

}  // namespace
}  // namespace cfg

LoadedConfig load_run_config(const ConfigSources& sources) {
  cfg::Loaded loaded = cfg::load_all(sources, true);
  LoadedConfig out;
  out.resolved_yaml = cfg::record_of(loaded);
  out.upstream_json = cfg::upstream_config_json(loaded.tree, loaded.stream_settings);
  out.config = std::move(loaded.config);
  return out;
}

Config load_config(const ConfigSources& sources) { return cfg::load_all(sources, true).config; }

std::string resolved_config_yaml(const ConfigSources& sources) {
  cfg::Loaded loaded = cfg::load_all(sources, false);
  return cfg::record_of(loaded);
}

std::vector<std::string> default_disagreements(const std::string& default_text) {
  using namespace cfg;
  Problems problems;
  std::vector<std::string> out;
  const auto doc = parse_yaml(default_text, kDefaultSource, problems);
  Config decoded;
  if (doc) {
    const Tree tree = flatten_document(*doc, kDefaultSource, SourceKind::Default, config_aliases(), problems);
    decode_config(tree, decoded, false, problems);
    const Config fresh;
    for (const auto& rule : config_rules())
      if (tree.find(rule.key) && !rule.same(fresh, decoded)) out.push_back(rule.key);
    for (const auto& sec : recompute_sections()) {
      const SectionRecompute &a = fresh.gradient_checkpointing.*sec.field, &b = decoded.gradient_checkpointing.*sec.field;
      if (a.mode != b.mode || a.every_n != b.every_n || a.blocks != b.blocks || a.pieces != b.pieces)
        out.push_back(sec.flag.empty() ? "gradient_checkpointing." + sec.name : sec.flag);
    }
    if (!fresh.checkpoint_node_rules.empty() || !decoded.checkpoint_node_rules.empty())
      out.push_back(kNodeRulesKey);
  }
  for (const auto& p : problems) out.push_back("problem: " + p);
  return out;
}

}  // namespace wg
