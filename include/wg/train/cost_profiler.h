// The automatic planner's cost model, measured: a short profiling pass on
// the run's actual shapes (its first batch) with nothing recomputed, where a
// PieceObserver records, per plan piece, the bytes it keeps for backward
// (its output included), its output bytes, and its forward time. An
// analytic estimate from the output shape is kept beside each measurement
// as a cross-check. Weights are not changed.
#pragma once

#include "wg/data/batch.h"
#include "wg/model/memory_planner.h"

namespace wg {

class Trainer;

// `repeats` probes after one warm-up probe; times are medians, bytes from
// the last probe. The trainer's plan is restored afterwards.
CostModel profile_costs(Trainer& trainer, const Batch& batch, int repeats = 3);

// The cost model as a table: piece, kept MiB, output MiB, analytic MiB,
// forward ms.
std::string cost_table(const CostModel& costs);

}  // namespace wg
