// The distributed context of the mpirun test binary, made once in its main.
#pragma once

#include "wg/dist/context.h"

namespace wg {
const DistContext& test_dist();
}  // namespace wg
