// Host batch -> model input tensors on the run's device, and the masked
// targets the loss compares against.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "wg/data/batch.h"
#include "wg/model/weather_model.h"

namespace wg {

ModelInput to_model_input(const Batch& batch, const torch::Device& device);

// Per stream, the values of the masked tokens: [Nm, token_size, C].
std::vector<torch::Tensor> masked_targets(const ModelInput& input);
// Per stream, which of those values are real targets ([Nm, token_size, C],
// 1/0), or an undefined tensor when all are (see StreamBatch::valid).
std::vector<torch::Tensor> masked_valid(const ModelInput& input);

// Tokens in the batch, all streams (for tokens/s).
int64_t token_count(const Batch& batch);

}  // namespace wg
