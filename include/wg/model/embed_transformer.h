// StreamEmbedTransformer (section `embed`), channels orientation
// (wg-model.md §4.3): maps each token [token_size, C] of one stream to
// [num_tokens, dim_out], attending across the token's C features. Names and
// registration order as WeatherGenerator's:
//   layers.{2i} (attention), layers.{2i+1} (MLP), embed,
//   unembed.{c} then ln_final.{c} (block read-out) or unembed + ln_final (full),
//   embed_centroids (always created; used only when embed_size_centroids > 0).
// Pieces: embed.<stream>/input (embed Linear + positional encoding),
// block<i>.attn, block<i>.mlp, readout.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "wg/model/attention.h"
#include "wg/model/layers.h"
#include "wg/model/mlp.h"
#include "wg/model/model_options.h"
#include "wg/model/piece.h"

namespace wg {


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

  // Width of each channel's read-out (block mode) and of the centroid
  // embedding after WeatherGenerator's adjustment that avoids padding.
  int readout_width() const { return d_c_; }
  int centroid_width() const { return e_; }

 private:
  // [N, C, dim_embed] -> [N, C*d_c] (block: every channel's norm and
  // product in one grouped product) or [N, T*dim_out - e] (full).
  torch::Tensor readout(const torch::Tensor& x, Saving saving);
  void build_pieces();

  EmbedOptions o_;
  int d_c_ = 0;  // block read-out width per channel
  int e_ = 0;    // centroid embedding width
  torch::nn::ModuleList layers{nullptr};
  torch::nn::Linear embed{nullptr};
  torch::nn::Linear embed_centroids{nullptr};
  torch::nn::Dropout dropout_final{nullptr};
  std::vector<SelfAttention> attention_;
  std::vector<Mlp> mlp_;
  std::vector<torch::nn::AnyModule> ln_block_;
  std::vector<torch::nn::Linear> unembed_block_;
  torch::nn::AnyModule ln_full_;
  torch::nn::Linear unembed_full_{nullptr};
  std::vector<Piece> pieces_;
  PieceObserver* observer_ = nullptr;
};
TORCH_MODULE(StreamEmbedTransformer);

}  // namespace wg
