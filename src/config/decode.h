// Private to the config loader: the known keys, and the typed decoding and
// validation of a merged tree into Config / StreamConfig (decode.cpp, with
// the per-key rules in decode_rules.cpp), the activation-recomputation keys
// (recompute_keys.cpp) and the per-node rules (node_rules.cpp).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/yaml_tree.h"
#include "wg/config/config.h"
#include "wg/config/recompute_sections.h"

namespace wg::cfg {

struct Schema {
  std::vector<std::string> leaves;    // keys that take a value
  std::vector<std::string> maps;      // keys that take a map of keys
  std::vector<std::string> opaque;    // keys accepted with any value (unused here)
  std::vector<std::string> required;  // must be present (default file / stream entry)
};

const Schema& config_schema();
const Schema& stream_schema();
// Other spellings of top-level keys -> the key (recomputation flags, the
// epoch names before mini-epochs).
const Aliases& config_aliases();

// Unknown keys, and values where a map belongs. `context` is appended to the
// key in messages, e.g. " in stream 'ERA5'".
void check_keys(const Tree& tree, const Schema& schema, const std::string& context,
                Problems& problems);

// Required keys absent from `tree`; `where` names the tree in messages.
void check_required(const Tree& tree, const Schema& schema, const std::string& where,
                    Problems& problems);

// Everything but the streams. `warn`: log the warnings (ignored sections,
// boolean overridden by the structured checkpoint form). Returns the keys
// that failed, so later cross checks can skip them.
std::set<std::string> decode_config(const Tree& tree, Config& cfg, bool warn, Problems& problems);

// One stream entry; `settings` holds its leaves relative to the entry.
StreamConfig decode_stream(const std::string& name, const Origin& origin, const Tree& settings,
                           Problems& problems);

// Checks that need both the config and its streams.
void check_with_streams(const Tree& tree, const Config& cfg, const std::set<std::string>& bad,
                        Problems& problems);

// Value helpers shared by the decoders.
std::string got(const YAML::Node& n);           // "got 'abc'", "got the list [1, 2]", ...
std::optional<long long> as_int(const YAML::Node& n);
std::optional<bool> as_bool(const YAML::Node& n);
std::optional<double> as_number(const YAML::Node& n);  // finite numbers only

// ---- recompute_keys.cpp: the activation-recomputation keys ---------------
const std::vector<std::string>& recompute_keys();           // all of them (canonical)
const std::vector<std::string>& recompute_required_keys();  // the sections' booleans
Aliases recompute_aliases();                                // the sections' other flag spellings, legacy flag names
// Resolves Config::gradient_checkpointing; adds failed keys to `bad`.
void decode_recompute(const Tree& tree, Config& cfg, bool warn, Problems& problems, std::set<std::string>& bad);
// Block indices against the sections' block counts (needs the streams).
void check_recompute_blocks(const Tree& tree, const Config& cfg, const std::set<std::string>& bad,
                            Problems& problems);

// One part of a section as given: its value, where it was set, and its key as
// named in messages (e.g. "gradient_checkpointing.ae_global.every_n").
struct SectionPart {
  YAML::Node value;
  Origin origin;
  std::string key;
};
// A section as given, by the flat tree (gradient_checkpointing.<name>) or by
// a node rule (checkpoint_node_rules[i].set.<name>).
struct SectionInput {
  std::string base;                 // the section's key in messages
  Origin origin;                    // where the section starts
  std::optional<SectionPart> mode;  // the shorthand (key == base) or `mode`
  std::optional<SectionPart> every_n;
  std::optional<SectionPart> blocks;
  std::optional<SectionPart> pieces;
};
// The one section parser (mode, every_n, blocks, pieces and their rules) of both
// forms. The result has set == true; failed keys are added to `bad`.
SectionRecompute decode_section(const SectionInput& in, Problems& problems, std::set<std::string>& bad);
// Block indices of `sc` against `section`'s block count; `key` and `at`
// name the blocks in messages.
void check_section_blocks(const SectionRecompute& sc, const RecomputeSectionInfo& section, const std::string& key,
                          const Origin& at, const Config& cfg, const std::set<std::string>& bad,
                          Problems& problems);

// ---- node_rules.cpp: checkpoint_node_rules -------------------------------
inline const char* const kNodeRulesKey = "checkpoint_node_rules";
// Resolves Config::checkpoint_node_rules; on any problem adds kNodeRulesKey to `bad`.
void decode_node_rules(const Tree& tree, Config& cfg, bool warn, Problems& problems, std::set<std::string>& bad);
// Block indices of the rules' sections (needs the streams).
void check_node_rule_blocks(const Tree& tree, const Config& cfg, const std::set<std::string>& bad,
                            Problems& problems);

// ---- upstream_keys.cpp: WeatherGenerator's keys this trainer does not use --
inline const char* const kPlaceholder = "???";  // upstream's "must be set"
struct UnusedKey {
  const char* key;             // top-level key (its whole subtree when a map)
  const char* note;            // why it has no effect, for the warning
  const char* here = nullptr;  // a value that is what this trainer does anyway (no warning)
};
const std::vector<UnusedKey>& unused_upstream_keys();
std::vector<std::string> unused_upstream_key_names();
const UnusedKey* unused_key_of(const std::string& path);  // nullptr: a used key
bool is_placeholder(const YAML::Node& n);
// `???` on a key other than run_id and data_loader_rng_seed (which generate
// or derive a value): one problem each, added to `bad`.
void check_placeholders(const Tree& tree, Problems& problems, std::set<std::string>& bad);
// One warning listing the not-used keys that a config file or --set gives,
// and one per such key whose value differs from upstream's default.
void report_unused_keys(const Tree& merged, const Tree& defaults, bool warn);

}  // namespace wg::cfg
