// wgtrain: MPI up, the command line, the run, and the one place where
// failures become exit codes (wg/train/run_error.h). A rank that fails on
// its own ends the whole job (MPI_Abort), naming itself, so no rank waits
// forever in a collective.
#include <spdlog/spdlog.h>

#include <iostream>

#include "wg/dist/context.h"
#include "wg/train/cli.h"
#include "wg/train/run.h"
#include "wg/train/run_error.h"
#include "wg/train/stop_request.h"

int main(int argc, char** argv) {
  wg::install_stop_handlers();  // first: a USR1 or TERM this early stops the run at its first step
  wg::DistContext dist(&argc, &argv);
  try {
    const wg::CliOptions options = wg::parse_cli(argc, argv);
    if (options.exit_now) {
      if (dist.rank() == 0) std::cout << options.output;
      return 0;
    }
    return wg::run_training(options, dist);
  } catch (const wg::RunError& e) {
    return wg::report(e, dist);
  } catch (const std::exception& e) {
    spdlog::error("rank {} of {} failed: {}", dist.rank(), dist.size(), e.what());
    if (dist.size() > 1) dist.abort(1);
    return 1;
  }
}
