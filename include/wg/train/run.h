// The `wgtrain` program: command line, then config -> plan -> trainer ->
// sinks -> exit code. main() only calls these.
#pragma once

#include <string>
#include <vector>

#include "wg/config/loader.h"
#include "wg/dist/context.h"

namespace wg {

struct CliOptions {
  ConfigSources sources;
  std::string log_level = "info";
  bool help = false;
  bool version = false;
  bool print_plan = false;  // resolve config and plan, print them, exit
  std::string init_weights;         // safetensors file to initialise from
  std::string init_weights_prefix;  // "P" or "FILE_PREFIX=MODEL_PREFIX" (see io/weights.h)
};

// Throws std::invalid_argument with a usage hint on a bad command line.
CliOptions parse_cli(const std::vector<std::string>& args);
std::string usage();

// Runs on every rank; rank 0 writes the run directory and logs progress.
// Exit codes: 0 done, 1 runtime failure, 2 bad configuration, command line
// or initial weights, 3 non-finite loss under nan_policy.
int run_training(const CliOptions& options, const DistContext& dist);

}  // namespace wg
