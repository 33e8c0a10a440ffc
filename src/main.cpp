// wgtrain: parse the command line, run, map failures to exit codes.
#include <spdlog/spdlog.h>

#include <iostream>

#include "wg/train/run.h"

int main(int argc, char** argv) {
  try {
    const wg::CliOptions options = wg::parse_cli({argv + 1, argv + argc});
    if (options.help) { std::cout << wg::usage(); return 0; }
    if (options.version) { std::cout << "wgtrain " << WG_VERSION << "\n"; return 0; }
    return wg::run_training(options);
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n" << wg::usage();
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
