// Section `latent` (WeatherGenerator's global assimilation engine, keys
// ae_global_*): pre-norm self-attention + MLP blocks over all latent tokens
// of one sample, so a masked token can be inferred from its neighbours.
// Parameters: layers.{2i} (attention), layers.{2i+1} (MLP), ln_out.
//
// Section `pred`: one head per stream mapping a token's latent vectors back
// to its token_size x C values. Parameters: layers.0 (LayerNorm),
// layers.1 and layers.3 (Linear).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "wg/model/layers.h"
#include "wg/model/piece.h"

namespace wg {

struct LatentOptions {
  int dim = 2048;
  int num_blocks = 8;
  int num_heads = 32;
  int mlp_hidden_factor = 2;
  double dropout_rate = 0.1;
  std::string norm_type = "LayerNorm";
  bool bf16_attention_on_cuda = true;
};

class LatentEngineImpl : public torch::nn::Module {
 public:
  explicit LatentEngineImpl(const LatentOptions& options);
  void set_plan(const RecomputePlan& plan) { apply_plan(pieces_, plan); }
  std::vector<PieceKey> piece_keys() const { return keys_of(pieces_); }
  void set_observer(PieceObserver* observer) { observer_ = observer; }
  torch::Tensor forward(const torch::Tensor& tokens);  // [B, L, dim] -> [B, L, dim]

 private:
  std::vector<MultiSelfAttentionHead> attention_;
  std::vector<Mlp> mlp_;
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm ln_out{nullptr};
  std::vector<Piece> pieces_;
  PieceObserver* observer_ = nullptr;
};
TORCH_MODULE(LatentEngine);

class PredHeadImpl : public torch::nn::Module {
 public:
  PredHeadImpl(int dim_in, int hidden, int dim_out);
  void set_plan(const RecomputePlan& plan) { apply_plan(pieces_, plan); }
  std::vector<PieceKey> piece_keys() const { return keys_of(pieces_); }
  void set_observer(PieceObserver* observer) { observer_ = observer; }
  torch::Tensor forward(const torch::Tensor& x);  // [M, dim_in] -> [M, dim_out]

 private:
  torch::nn::Sequential layers{nullptr};
  std::vector<Piece> pieces_;
  PieceObserver* observer_ = nullptr;
};
TORCH_MODULE(PredHead);

}  // namespace wg
