// The prediction section of WeatherGenerator's model for one stream
// (wg-model.md §4.9), decoder_type PerceiverIOCoordConditioning:
//   embed_target_coords.<s>.linear      Linear(105 + G -> E), no bias: the target points' coordinates
//   target_token_engines.<s>.tte.{...}  per layer: cross-attention of each cell's points to the 9
//                                       latent cells around it, self-attention among the points of a
//                                       cell, MLP, all AdaLayerNorm-conditioned on the coordinates
//   pred_heads.<s>.pred_heads.{m}.{...} ens_size members: Linear(s) to the target channels
// Pieces: pred.<s>/input, pred.<s>/block<l>.cross, .attn, .mlp, pred.<s>/head.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "wg/model/attention.h"
#include "wg/model/mlp.h"
#include "wg/model/model_options.h"
#include "wg/model/piece.h"

namespace wg {


// The known final activations of a prediction head (case-insensitive), for config checks.
bool known_final_activation(const std::string& name);

class CoordEmbeddingImpl : public torch::nn::Module {  // NamedLinear
 public:
  CoordEmbeddingImpl(int64_t dim_in, int64_t dim_out);
  torch::Tensor forward(const torch::Tensor& coords) { return linear(coords); }

 private:
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(CoordEmbedding);

class TargetTokenEngineImpl : public torch::nn::Module {
 public:
  explicit TargetTokenEngineImpl(const DecoderOptions& options);
  // The block pieces: e [P, E] -> [P, E]. latent [N, D_g]: the latent's
  // tokens; kv_rows [K]: rows of latent, each cell's 9 neighbourhood cells'
  // tokens in turn (the cross-attention's key rows, gathered after its
  // norm and product); coords [P, 105 + G] (AdaLayerNorm's aux).
  void add_pieces(std::vector<Piece>& pieces, const std::vector<PieceMode>& modes, size_t first,
                  const torch::Tensor& latent, const torch::Tensor& kv_rows, const torch::Tensor& coords,
                  const VarlenSegments& to_latent, const VarlenSegments& within_cells);
  std::vector<PieceKey> block_keys() const;

 private:
  DecoderOptions o_;
  std::vector<CrossAttention> cross_;
  std::vector<SelfAttention> self_;
  std::vector<Mlp> mlp_;
};
TORCH_MODULE(TargetTokenEngine);

class EnsPredictionHeadImpl : public torch::nn::Module {
 public:
  explicit EnsPredictionHeadImpl(const DecoderOptions& options);
  torch::Tensor forward(const torch::Tensor& e);  // [P, E] -> [ens, P, channels]

 private:
  std::vector<std::vector<torch::nn::AnyModule>> members_;
};
TORCH_MODULE(EnsPredictionHead);

}  // namespace wg
