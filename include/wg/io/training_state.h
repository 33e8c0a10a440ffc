// The full training state in one safetensors file, separate from plain
// weights: model parameters ("model.<name>"), AdamW moments
// ("optimizer.<name>.exp_avg", ".exp_avg_sq") and per-parameter step
// counts ("optimizer.<name>.step", I64), with the next training step in the
// metadata ("next_step"). Loading checks everything before changing
// anything.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace wg {

void save_training_state(const std::string& path, const torch::nn::Module& model, torch::optim::AdamW& optimizer,
                         int64_t next_step);
// Returns the step to continue from.
int64_t load_training_state(const std::string& path, torch::nn::Module& model, torch::optim::AdamW& optimizer);

}  // namespace wg
