// The assimilation engines of WeatherGenerator's model (wg-model.md §4.4-4.8):
//   LocalEngine        ae_local_engine.ae_local_blocks: attention within each cell + MLP, per block
//   Adapter            ae_local_global_engine.ae_adapter: one query per cell cross-attends to its
//                      tokens (SlicedQ), MLP, SlicedQ again
//   TransformerEngine  ae_aggregation_engine.ae_aggregation_blocks, ae_global_engine.ae_global_blocks,
//                      forecast_engine.fe_blocks: dense or block-local attention + MLP per block
// Each is one section of the recomputation plan; its forward is one loop
// over its pieces (wg/model/piece.h).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "wg/model/attention.h"
#include "wg/model/mlp.h"
#include "wg/model/model_options.h"
#include "wg/model/piece.h"

namespace wg {

// Attention within each cell (varlen over the token buffer).
class LocalEngineImpl : public torch::nn::Module, public PlannedPieces {
 public:
  explicit LocalEngineImpl(const EngineOptions& options);
  torch::Tensor forward(const torch::Tensor& tokens, const VarlenSegments& cells);  // [M, D_l] -> same

 private:
  std::vector<SelfAttention> attention_;
  std::vector<Mlp> mlp_;
};
TORCH_MODULE(LocalEngine);


// Queries of the non-empty cells [n, nq, D_g] attend to the tokens of their
// cell. Pieces: block0.cross, block0.mlp, block1.cross.
class AdapterImpl : public torch::nn::Module, public PlannedPieces {
 public:
  explicit AdapterImpl(const AdapterOptions& options);
  // queries [n, nq, D_g], tokens [M, D_l]; cells: one query row per non-empty
  // cell, its tokens as keys.
  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& tokens, const VarlenSegments& cells);

 private:
  std::vector<CrossAttention> cross_;
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Adapter);

// Dense (or block-local) self-attention blocks over [B, L, D].
class TransformerEngineImpl : public torch::nn::Module, public PlannedPieces {
 public:
  explicit TransformerEngineImpl(const EngineOptions& options);
  // x [B, L, D]; aux [B, L, dim_aux] for AdaLayerNorm (forecast), else undefined.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& aux = {});
  int64_t num_blocks() const { return int64_t(attention_.size()); }

 private:
  std::vector<SelfAttention> attention_;
  std::vector<Mlp> mlp_;
};
TORCH_MODULE(TransformerEngine);

}  // namespace wg
