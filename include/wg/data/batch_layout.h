// Batch assembly (wg-data.md §7; wg-model.md §2): the counts and scatter
// indices that place every stream's source tokens into the model's one
// cell-major token buffer, and the per-cell target counts.
//
// Invariants:
// - Each sample has its own cells: global cell g = b·C + c. The buffer is
//   ordered by g (all of sample 0's cells first); inside a cell, streams in
//   config order, then token order. For B = 1 this is upstream's layout
//   exactly; for B > 1 the batch is the per-sample layouts concatenated
//   (upstream mixes samples inside a cell and is B = 1 only, §12.13).
// - source_cell_lens and target_coords_idx are lengths (leading 0), not offsets.
// - idxs_embed_pe[j] = position of token j inside its cell's combined
//   sequence (row of pe_embed); max_cell_tokens bounds it.
#pragma once

#include <cstdint>
#include <vector>

#include "wg/data/stream_sample.h"

namespace wg {

struct BatchLayout {
  int64_t num_samples = 0;  // B
  int64_t num_streams = 0;  // S
  int64_t num_cells = 0;    // C
  int64_t num_forecast_steps = 0;
  int64_t num_tokens = 0;                           // rows of the token buffer
  int32_t max_cell_tokens = 0;                      // largest Σ_s tokens of one cell (pe_embed has 1024 rows upstream)
  std::vector<int32_t> source_cell_lens;            // [1 + B·C]
  std::vector<std::vector<int64_t>> idxs_embed;     // [B·S] (index b·S + s), each [N_s(b, s)]
  std::vector<std::vector<int32_t>> idxs_embed_pe;  // [B·S], each [N_s(b, s)]
  std::vector<std::vector<std::vector<int32_t>>> target_coords_idx;  // [S][F], each [1 + B·C]
};

// From per-(sample, stream) counts: source_lens[b·S + s] is [C] tokens per
// cell, target_lens[(b·S + s)·F + f] is [C] target points per cell.
BatchLayout layout_from_lens(int64_t num_samples, int64_t num_streams, int64_t num_cells, int64_t num_steps,
                             const std::vector<std::vector<int32_t>>& source_lens,
                             const std::vector<std::vector<int32_t>>& target_lens);

// batch[b][s]; every stream of every sample must have the same number of
// target steps and C cells (PipelineError otherwise).
BatchLayout layout_batch(const std::vector<std::vector<StreamSample>>& batch);

}  // namespace wg
