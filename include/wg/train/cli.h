// The command line of wgtrain (CLI11): options, generated --help, and one
// clear error with exit code 2 for bad usage.
#pragma once

#include <string>

#include "wg/config/loader.h"

namespace wg {

struct CliOptions {
  ConfigSources sources;            // --config FILE..., --set KEY=VALUE..., --data-path DIR (last)
  std::string log_level = "info";
  bool print_plan = false;          // resolve config and plan, print them, exit
  std::string init_weights;         // safetensors file to initialise from
  std::string init_weights_prefix;  // "P" or "FILE_PREFIX=MODEL_PREFIX" (see io/weights.h)
  std::string dump_step;            // write one step to this file and exit (docs/step-dump.md)
  std::string dump_step_dtype = "f32";  // f32 | f64
  bool exit_now = false;            // --help or --version: print `output`, exit 0
  std::string output;
};

// Throws RunError (exit code 2) naming the bad option.
CliOptions parse_cli(int argc, const char* const* argv);

}  // namespace wg
