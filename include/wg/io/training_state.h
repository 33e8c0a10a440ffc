// The full training state in one safetensors file, separate from plain
// weights: model parameters ("model.<name>"), AdamW moments
// ("optimizer.<name>.exp_avg", ".exp_avg_sq") and per-parameter step
// counts ("optimizer.<name>.step", I64), the weight average when there is
// one ("ema.<name>", in named_parameters order), with the next training
// step in the metadata ("next_step"; the learning-rate schedule and β1 are
// a function of it), and where the run scales its loss the scaler's state
// ("loss_scale", "loss_scale_growth_tracker"). Loading checks everything
// before changing anything.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

namespace wg {

// The dynamic loss scaler's state (wg/train/loss_scaler.h).
struct LossScaleState {
  double scale = 0;
  int64_t growth_tracker = 0;
};

// `ema`: the weight average, one tensor per parameter (empty: none).
void save_training_state(const std::string& path, const torch::nn::Module& model, torch::optim::AdamW& optimizer,
                         int64_t next_step, const std::vector<torch::Tensor>& ema = {},
                         std::optional<LossScaleState> loss_scale = std::nullopt);
// Returns the step to continue from. With `ema`, the file must hold a
// weight average, copied into it. With `loss_scale`, the scaler's state
// where the file holds one (else nullopt: it was written without scaling).
int64_t load_training_state(const std::string& path, torch::nn::Module& model, torch::optim::AdamW& optimizer,
                            std::vector<torch::Tensor>* ema = nullptr,
                            std::optional<LossScaleState>* loss_scale = nullptr);

}  // namespace wg
