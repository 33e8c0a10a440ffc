// What the benchmarks share: their command line (CLI11) with --config FILE
// and --set KEY=VALUE as for wgtrain (default config/cpu_small.yml), the
// handling of --help (exit 0) and bad usage (one clear line, exit 2), one
// recomputation mode applied to every section, and the C++ side's CPU
// set-up as wgtrain makes it.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <string>

#include "wg/config/loader.h"
#include "wg/config/recompute_sections.h"
#include "wg/util/memory.h"
#include "wg/util/threads.h"

namespace wg::bench {

// --config and --set of a benchmark that loads a run configuration.
inline void add_config_options(CLI::App& app, ConfigSources& sources) {
  app.add_option("--config", sources.files, "overlay a YAML file on default_config.yml (repeatable; default "
                                            "config/cpu_small.yml)")
      ->type_name("FILE")
      ->allow_extra_args(false);
  app.add_option("--set", sources.overrides, "override one key (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

// Parses the command line; --help prints and exits 0, a bad option prints
// one line naming it and exits 2 (only on rank `rank` 0 of a multi-rank
// benchmark).
inline void parse_or_exit(CLI::App& app, int argc, char** argv, int rank = 0) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (rank == 0) std::cout << app.help();
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) std::cerr << "error: " << e.what() << "\nRun with --help for the options.\n";
    std::exit(2);
  }
}

// The benchmark default when no --config was given.
inline void default_config(ConfigSources& sources) {
  if (sources.files.empty()) sources.files.push_back(std::string(WG_SOURCE_DIR) + "/config/cpu_small.yml");
}

// `mode` (with every_n) in every section, no block lists.
inline Config with_mode(Config c, RecomputeMode mode, int every_n) {
  c.gradient_checkpointing = every_section(mode, every_n);
  return c;
}

// The rank's CPU set-up as wgtrain's build_trainer makes it: `threads`
// compute threads, and freed memory kept for the next step up to c's
// cpu_keep_freed_mib (glibc's thresholds: without them each step faults
// its activations back in). Returns whether the C library took them.
inline bool trainer_cpu_setup(const Config& c, int threads) {
  set_compute_threads(threads);
  return keep_freed_cpu_memory(int64_t(c.cpu_keep_freed_mib) << 20);
}

}  // namespace wg::bench
