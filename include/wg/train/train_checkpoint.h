// Training checkpoints in the run directory, for stopping and exact resume:
//   checkpoints/step_<next step, 10 digits>/state.safetensors   model, AdamW, weight average, next step (rank 0)
//   checkpoints/step_<...>/rng_rank<r>.safetensors              each rank's random generator state
// Written into a temporary directory and renamed into place once complete,
// so a crash (even kill -9) mid-write leaves the previous checkpoints
// intact; only the newest `keep` are kept. Every rank takes part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace wg {

class Trainer;
class DistContext;

void save_checkpoint(const std::string& run_dir, Trainer& trainer, int64_t next_step, const DistContext& dist,
                     int keep);

// Loads the newest valid checkpoint and returns the step to continue from;
// checkpoints that do not load (partial, corrupt) are skipped with a
// warning. Returns nullopt when the run has no checkpoints; throws
// std::runtime_error when it has some but none is valid (never trains from
// scratch silently).
std::optional<int64_t> resume_latest(const std::string& run_dir, Trainer& trainer, const DistContext& dist);

// The step the newest checkpoint of the run continues at, read from its
// directory's name (step_<10 digits>) without loading it; nullopt when the
// run has none. A restart tries that checkpoint first.
std::optional<int64_t> newest_checkpoint_step(const std::string& run_dir);

}  // namespace wg
