// StreamEmbedTransformer (section `embed`), channels orientation: maps each
// token [token_size, C] of one stream to [num_tokens, dim_out], attending
// across the token's channels. Layout and parameter names follow
// WeatherGenerator (README, Model):
//   embed, layers.{2i} (attention), layers.{2i+1} (MLP),
//   unembed.{c} + ln_final.{c} (block read-out) or unembed + ln_final (full),
//   embed_centroids (when embed_size_centroids > 0).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "wg/model/layers.h"
#include "wg/model/piece.h"

namespace wg {

struct EmbedOptions {
  std::string stream;               // names the pieces: "embed.<stream>/..."
  int num_tokens = 1;
  int token_size = 8;
  int num_channels = 1;
  int dim_embed = 256;
  int dim_out = 1024;
  int num_blocks = 2;
  int num_heads = 8;
  double dropout_rate = 0.1;
  double dropout_final_rate = 0.1;  // on the output
  std::string norm_type = "LayerNorm";
  int embed_size_centroids = 0;
  std::string unembed_mode = "block";  // block | full
  bool bf16_attention_on_cuda = true;
};

class StreamEmbedTransformerImpl : public torch::nn::Module {
 public:
  explicit StreamEmbedTransformerImpl(const EmbedOptions& options);

  // Which pieces recompute in backward (the plan's embed.<stream> pieces);
  // default: none.
  void set_plan(const RecomputePlan& plan) { apply_plan(pieces_, plan); }
  std::vector<PieceKey> piece_keys() const { return keys_of(pieces_); }  // forward order
  void set_observer(PieceObserver* observer) { observer_ = observer; }

  // x_in [N, token_size, C], centroids [N, 5] (used when
  // embed_size_centroids > 0) -> [N, num_tokens, dim_out]
  torch::Tensor forward(const torch::Tensor& x_in, const torch::Tensor& centroids = {});

  // Width of each channel's read-out (block mode) and the centroid width
  // after WeatherGenerator's adjustment that avoids padding.
  int readout_width() const { return d_c_; }
  int centroid_width() const { return e_; }

 private:
  torch::Tensor readout(const torch::Tensor& x);  // [N, C, dim_embed] -> [N, C*d_c] or [N, T*dim_out - e]
  void build_pieces();

  EmbedOptions o_;
  int d_c_ = 0;  // block read-out width per channel
  int e_ = 0;    // centroid embedding width
  torch::nn::Linear embed{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::Linear embed_centroids{nullptr};
  torch::nn::Dropout dropout_final{nullptr};
  std::vector<MultiSelfAttentionHead> attention_;
  std::vector<Mlp> mlp_;
  std::vector<torch::nn::LayerNorm> ln_block_;
  std::vector<torch::nn::Linear> unembed_block_;
  torch::nn::LayerNorm ln_full_{nullptr};
  torch::nn::Linear unembed_full_{nullptr};
  std::vector<Piece> pieces_;
  PieceObserver* observer_ = nullptr;
};
TORCH_MODULE(StreamEmbedTransformer);

}  // namespace wg
