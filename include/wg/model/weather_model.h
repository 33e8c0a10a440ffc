// The network the trainer trains: per-stream embed transformers (section
// `embed`), the latent adapter and engine (section `latent`), per-stream
// prediction heads (section `pred`). Masked token modelling: the embed sees
// only visible tokens; masked positions enter the latent engine as a learned
// mask token; heads predict the masked tokens' values.
//
// state_dict names: embed_engine.embeds.<S>.*, latent_adapter.*,
// latent_engine.*, pred_heads.<S>.*
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/batch.h"
#include "wg/plan/recompute_plan.h"
#include "wg/model/embed_transformer.h"
#include "wg/model/latent.h"

namespace wg {

struct StreamInput {
  std::string stream;
  torch::Tensor values;     // [B, T, token_size, C] normalised
  torch::Tensor centroids;  // [B, T, 5]
  torch::Tensor visible;    // [Nv] int64: flat indices into B*T
  torch::Tensor masked;     // [Nm] int64
  torch::Tensor valid;      // [B, T, token_size, C] float 1/0: real targets; undefined = all
};

struct ModelInput {
  int64_t batch_size = 0;
  std::vector<StreamInput> streams;  // config order
};

// Joins the latent tokens of all streams of a sample: projection to the
// latent width, learned mask token at masked positions, an embedding of
// every token's centroid (so masked tokens know where they are), positional
// encoding over token positions, and a learned embedding per stream.
class LatentAdapterImpl : public torch::nn::Module {
 public:
  LatentAdapterImpl(int dim_in, int dim, int num_streams);
  // emb [Nv, num_tokens, dim_in] of stream s, centroids [B*T, 5] -> [B, T*num_tokens, dim]
  torch::Tensor forward(const torch::Tensor& emb, const torch::Tensor& visible, const torch::Tensor& centroids,
                        int64_t B, int64_t T, int stream);

 private:
  torch::nn::Linear proj_in{nullptr}, embed_coords{nullptr};
  torch::Tensor mask_token, stream_embed;
};
TORCH_MODULE(LatentAdapter);

class WeatherModelImpl : public torch::nn::Module {
 public:
  // `shapes`: what the data layer resolved for each stream of config.streams, in order.
  WeatherModelImpl(const Config& config, const std::vector<StreamShape>& shapes);

  // Applies the plan to every section. Call before training, and again
  // only between steps (the automatic planner's fallback does).
  void set_plan(const RecomputePlan& plan);
  // The keys of its recomputable pieces in forward order, each once (every
  // stream's head is the one piece pred/head): model_pieces(config).
  std::vector<PieceKey> piece_keys() const;
  // Sees every piece's forward in every section; nullptr: none.
  void set_observer(PieceObserver* observer);

  // Predictions for the masked tokens of each stream: [Nm, token_size, C].
  std::vector<torch::Tensor> forward(const ModelInput& input);

 private:
  std::vector<StreamConfig> streams_;
  torch::nn::ModuleDict embeds_{nullptr};
  LatentAdapter latent_adapter{nullptr};
  LatentEngine latent_engine{nullptr};
  torch::nn::ModuleDict pred_heads{nullptr};
  int dim_latent_;
};
TORCH_MODULE(WeatherModel);

EmbedOptions embed_options(const Config& config, const StreamConfig& stream, const StreamShape& shape);

}  // namespace wg
