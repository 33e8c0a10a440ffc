// One training step as a safetensors file (docs/step-dump.md): the batch,
// the weights, the fixed tables, every section's output, the predictions,
// the loss and every gradient, with dropout off. The PyTorch twin
// (tests/reference/wg_twin.py check) runs the same step and compares.
#pragma once

#include <string>

#include "wg/config/config.h"
#include "wg/data/sample_builder.h"

namespace wg {

class Trainer;

// Runs forward and backward on `batch` (model in eval mode: no dropout, no
// latent noise), writes the file, and leaves weights and optimizer as they
// were (gradients zeroed). Returns the loss. With `float64` the step runs
// in double precision and every floating point tensor is written F64 (the
// twin then checks in float64: logic, free of float32 rounding).
double write_step_dump(const std::string& path, Trainer& trainer, const Config& config, const BuiltBatch& batch,
                       int64_t step, bool float64 = false);

}  // namespace wg
