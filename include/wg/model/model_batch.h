// What WeatherGenerator's model reads in one step (wg-model.md §2;
// docs/step-dump.md), on the run's device, for B samples of S streams. Each
// sample has its own C cells: global cell g = b·C + c. The counts that
// shape attention are also kept on the host (the segments are built there).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "wg/model/flops.h"

namespace wg {

struct StreamBatchTensors {
  std::string name;
  // per sample b
  std::vector<torch::Tensor> source_tokens;     // [N_b, token_size, F_src] cell order
  std::vector<torch::Tensor> source_centroids;  // [N_b, 5]
  std::vector<torch::Tensor> idxs_embed;        // [N_b] int64: rows of the token buffer
  std::vector<torch::Tensor> idxs_embed_pe;     // [N_b] int64: positions in the cell (rows of pe_embed)
  std::vector<double> weight;                   // 0: the stream was spoofed (no data) in sample b
  // per target step f (0 .. forecast_offset + forecast_steps; steps before
  // forecast_offset have no points), all samples' points in global-cell order
  std::vector<torch::Tensor> target_coords;     // [P, F_tc]
  std::vector<torch::Tensor> target_values;     // [P, F_tgt], NaN where the data has no value
  std::vector<std::vector<int64_t>> target_lens;    // [B·C]: points per global cell
  std::vector<std::vector<int64_t>> sample_points;  // [B]: points per sample
  std::vector<std::vector<int64_t>> target_times;   // [P] seconds since 1970 (the loss's sub-steps)
  std::vector<std::vector<float>> target_lat;       // [P] latitude in degrees (location weights)
};

struct ModelBatch {
  int64_t num_samples = 0;  // B
  int64_t num_cells = 0;    // C
  int64_t num_tokens = 0;   // M: rows of the token buffer
  std::vector<int64_t> source_cell_lens;  // [B·C] tokens per global cell, all streams
  std::vector<StreamBatchTensors> streams;
  int64_t num_target_steps() const { return streams.empty() ? 0 : int64_t(streams.front().target_coords.size()); }
};

// The shapes the FLOP count reads (wg/model/flops.h).
FlopShape flop_shape(const ModelBatch& batch);

}  // namespace wg
