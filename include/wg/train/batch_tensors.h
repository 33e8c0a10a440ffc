// A host batch of the data pipeline (wg/data/sample_builder.h) as the
// model's tensors on the run's device (wg/model/model_batch.h), and its
// size for throughput figures.
#pragma once

#include <torch/torch.h>

#include "wg/data/sample_builder.h"
#include "wg/model/model_batch.h"

namespace wg {

// Copies every array once into tensors on `device`.
ModelBatch to_model_batch(const BuiltBatch& batch, const torch::Device& device);

// Source tokens in the batch, all streams and samples (for tokens/s).
int64_t token_count(const BuiltBatch& batch);
// Target points in the batch, all streams, samples and steps.
int64_t target_count(const BuiltBatch& batch);

}  // namespace wg
