// Reporting a RunError (see header).
#include "wg/train/run_error.h"

#include <spdlog/spdlog.h>

#include <sstream>

#include "wg/dist/context.h"

namespace wg {

int report(const RunError& e, const DistContext& dist) {
  const bool speaks = e.scope() == RunError::Scope::EveryRankOwn || dist.rank() == 0;
  if (speaks) {
    std::istringstream lines(e.what());
    for (std::string line; std::getline(lines, line);) spdlog::error("{}", line);
  }
  return e.exit_code();
}

}  // namespace wg
