// The wgtrain program's run, in phases (src/train/run.cpp reads as its
// story): load the config, open the data, decide the plan, make the run
// directory, build the trainer, attach the sinks, resume, train, finish.
#pragma once

#include "wg/dist/context.h"
#include "wg/train/cli.h"

namespace wg {

// Runs on every rank; rank 0 writes the run directory and logs progress.
// Returns 0; failures are RunError (exit code 2 or 3, wg/train/run_error.h)
// or other exceptions (exit code 1).
int run_training(const CliOptions& options, const DistContext& dist);

}  // namespace wg
