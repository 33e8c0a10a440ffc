// wgtrain: MPI up, parse the command line, run, map failures to exit codes.
// A rank that fails ends the whole job (MPI_Abort), naming itself, so no
// rank waits forever in a collective.
#include <spdlog/spdlog.h>

#include <iostream>

#include "wg/dist/context.h"
#include "wg/train/run.h"

int main(int argc, char** argv) {
  wg::DistContext dist(&argc, &argv);
  try {
    const wg::CliOptions options = wg::parse_cli({argv + 1, argv + argc});
    if (options.help) { if (dist.rank() == 0) std::cout << wg::usage(); return 0; }
    if (options.version) { if (dist.rank() == 0) std::cout << "wgtrain " << WG_VERSION << "\n"; return 0; }
    return wg::run_training(options, dist);
  } catch (const std::invalid_argument& e) {  // the command line: the same on every rank
    if (dist.rank() == 0) std::cerr << "error: " << e.what() << "\n" << wg::usage();
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("rank {} of {} failed: {}", dist.rank(), dist.size(), e.what());
    if (dist.size() > 1) dist.abort(1);
    return 1;
  }
}
