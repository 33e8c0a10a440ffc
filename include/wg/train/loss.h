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
  // preds and targets per stream, [Nm, token_size, C] each.
  torch::Tensor operator()(const std::vector<torch::Tensor>& preds, const std::vector<torch::Tensor>& targets) const;

 private:
  std::vector<LossTerm> terms_;
  std::vector<double> stream_weights_;
};

}  // namespace wg
