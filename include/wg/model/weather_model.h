// WeatherGenerator's model, whole (wg-model.md §4, §6): per-stream embed
// transformers scattered into a cell-ordered token buffer, attention within
// each HEALPix cell, one query per cell cross-attending to its tokens,
// aggregation over the non-empty cells, the global engine over every cell,
// the forecast engine between target steps, and per stream a decoder that
// predicts each target point from the 9 latent cells around it.
//
// state_dict (named_parameters) order: q_cells, embed_engine.embeds.<s>,
// ae_local_engine, ae_local_global_engine, ae_aggregation_engine,
// ae_global_engine, forecast_engine, embed_target_coords.<s>,
// target_token_engines.<s>, pred_heads.<s>. The fixed tables (upstream's
// ModelParams) are neither parameters nor buffers: not in the state_dict;
// they follow the model to its device at the first forward there. A
// diagnostic stream has no embed transformer (upstream: Identity).
//
// B samples: every sample has its own C cells (global cell g = b·C + c),
// attention never mixes samples; for B = 1 this is upstream's forward.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "wg/model/embed_transformer.h"
#include "wg/model/engines.h"
#include "wg/model/model_batch.h"
#include "wg/model/model_options.h"
#include "wg/model/prediction.h"
#include "wg/model/tables.h"

namespace wg {


struct ModelOutput {
  // [prediction i][stream]: [ens, P, channels] for target step
  // forecast_offset + i (every sample's points, global-cell order);
  // undefined when the stream has no target point at that step (or its
  // embedded target coordinates hold NaN, as upstream).
  std::vector<std::vector<torch::Tensor>> preds;
  // Predictions left undefined for a NaN in the embedded target coordinates
  // (upstream drops them; a loss with no stream left is then non-finite, not
  // "no data": Trainer::training_loss).
  int nan_dropped = 0;
  // With record_sections: "embed", "ae_local", "ae_adapter",
  // "ae_aggregation", "ae_global", "forecast.<f>" (docs/step-dump.md).
  std::map<std::string, torch::Tensor> sections;
};

class WeatherModelImpl : public torch::nn::Module {
 public:
  explicit WeatherModelImpl(const ModelOptions& options);

  // Applies the plan to every section. Call before training, and again
  // only between steps (the out-of-memory fallback does).
  void set_plan(const RecomputePlan& plan);
  // Its recomputable pieces in forward order, each once.
  std::vector<PieceKey> piece_keys() const;
  void set_observer(PieceObserver* observer);

  ModelOutput forward(const ModelBatch& batch, bool record_sections = false);

  const ModelOptions& options() const { return o_; }

  // Module::to, then the attention layers' fused projections placed one
  // after another again (SelfAttention::place_fused): a move to another
  // device or dtype gives each parameter its own storage.
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;
  // The fixed tables, on the device of the last forward (CPU before).
  const ModelTables& tables() const { return tables_; }

 private:
  void place_fused();
  torch::Tensor embed_tokens(const ModelBatch& batch);
  torch::Tensor aggregate(const torch::Tensor& queries, const std::vector<int64_t>& per_sample);
  // `nan_dropped` counts the streams given no prediction for a NaN in their
  // embedded target coordinates.
  std::vector<torch::Tensor> predict(const ModelBatch& batch, int64_t step, const torch::Tensor& latent,
                                     int& nan_dropped);

  ModelOptions o_;
  torch::Tensor q_cells;
  ModelTables tables_;
  std::vector<StreamEmbedTransformer> embeds_;
  std::vector<int> embed_of_stream_;  // [S] index into embeds_, -1 for a diagnostic stream
  LocalEngine ae_local_{nullptr};
  Adapter ae_adapter_{nullptr};
  TransformerEngine ae_aggregation_{nullptr}, ae_global_{nullptr}, forecast_{nullptr};
  std::vector<CoordEmbedding> coords_;
  std::vector<TargetTokenEngine> decoders_;
  std::vector<EnsPredictionHead> heads_;
  std::vector<PieceKey> pred_keys_;     // all streams' pred pieces, forward order
  std::vector<PieceMode> pred_modes_;
  PieceObserver* observer_ = nullptr;
};
TORCH_MODULE(WeatherModel);

}  // namespace wg
