// Masked-token loss: per stream a weighted sum of the configured loss
// functions (mse, mae) over the masked tokens, then streams combined by
// their loss_weight (normalised to sum 1).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "wg/config/config.h"

namespace wg {

class MaskedLoss {
 public:
  explicit MaskedLoss(const Config& config);
  // preds and targets per stream, [Nm, token_size, C] each. `valid` (per
  // stream, same shape, 1/0; undefined or absent = all valid) leaves values
  // out of the loss: the mean runs over the valid ones.
  torch::Tensor operator()(const std::vector<torch::Tensor>& preds, const std::vector<torch::Tensor>& targets,
                           const std::vector<torch::Tensor>& valid = {}) const;

 private:
  std::vector<LossTerm> terms_;
  std::vector<double> stream_weights_;
};

}  // namespace wg
