// The full training state in one safetensors file, separate from plain
// weights: model parameters ("model.<name>"), AdamW moments
// ("optimizer.<name>.exp_avg", ".exp_avg_sq") and per-parameter step
// counts ("optimizer.<name>.step", I64), the weight average when there is
// one ("ema.<name>", in named_parameters order), with the next training
// step in the metadata ("next_step"; the learning-rate schedule and β1 are
// a function of it). Loading checks everything before changing anything.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace wg {

// `ema`: the weight average, one tensor per parameter (empty: none).
void save_training_state(const std::string& path, const torch::nn::Module& model, torch::optim::AdamW& optimizer,
                         int64_t next_step, const std::vector<torch::Tensor>& ema = {});
// Returns the step to continue from. With `ema`, the file must hold a
// weight average, copied into it.
int64_t load_training_state(const std::string& path, torch::nn::Module& model, torch::optim::AdamW& optimizer,
                            std::vector<torch::Tensor>* ema = nullptr);

}  // namespace wg
