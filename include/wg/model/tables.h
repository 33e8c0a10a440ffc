// The model's fixed tables (WeatherGenerator's ModelParams, wg-model.md §3):
// not parameters, not in the state_dict, built once per run on CPU and
// moved to the device.
//   pe_embed  [1024, D_l]    harmonic encoding (base 1024) of a token's position in its cell
//   pe_global [C, nq, D_g]   harmonic encoding of cell and query slot
//   hp_nbours [C, 9] int64   each cell, then its 8 neighbours SW..S (missing: the cell itself)
// Both encodings follow upstream's float32 recipe and are rounded to
// bfloat16 (upstream stores them in the attention dtype), held in float32.
#pragma once

#include <torch/torch.h>

namespace wg {

constexpr int64_t kPeEmbedRows = 1024;  // positions in a cell pe_embed covers (upstream's len_token_seq)

struct ModelTables {
  torch::Tensor pe_embed;
  torch::Tensor pe_global;
  torch::Tensor hp_nbours;
  int64_t num_cells = 0;

  static ModelTables build(int healpix_level, int64_t dim_local, int64_t dim_global, int64_t num_queries);
  ModelTables to(const torch::Device& device) const;
};

}  // namespace wg
