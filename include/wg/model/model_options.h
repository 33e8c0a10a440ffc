// The model's construction options, one struct per section, and how a run's
// configuration and its streams' shapes fill them (wg-model.md §6.5). Plain
// values, no LibTorch: what is built is decided here, read by the sections.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/stream_shape.h"

namespace wg {

// One stream's StreamEmbedTransformer (embed_engine.embeds.<stream>).
struct EmbedOptions {
  std::string stream;               // names the pieces: "embed.<stream>/..."
  int num_tokens = 1;
  int token_size = 8;
  int num_channels = 1;             // features per point (8 + G + n_src)
  int dim_embed = 256;
  int dim_out = 1024;
  int num_blocks = 2;
  int num_heads = 8;
  double dropout_rate = 0.1;
  double dropout_final_rate = 0.1;  // on the output (upstream: fixed 0.1)
  std::string norm_type = "LayerNorm";  // the read-out norms: LayerNorm | RMSNorm
  int embed_size_centroids = 0;
  std::string unembed_mode = "block";  // block | full
};

// A stack of attention + MLP blocks (local, aggregation, global, forecast).
struct EngineOptions {
  std::string section;       // plan section: "ae_local", "ae_aggregation", "ae_global", "forecast"
  std::string blocks_name;   // module list name: "ae_local_blocks", ...
  int64_t dim = 0;
  int64_t num_blocks = 0;
  int64_t num_heads = 1;
  double dropout = 0.0;
  bool qk_norm = true;
  double norm_eps = 1e-4;
  double mlp_norm_eps = 1e-5;
  double mlp_hidden_factor = 2;
  double dense_rate = 1.0;    // block i is dense iff i % int(1 / rate) == 0 or i == last_dense_block
  int64_t block_factor = 64;  // block-local attention: tokens per block
  int64_t last_dense_block = -1;
  int64_t dim_aux = 0;        // forecast engine: AdaLayerNorm on the step (1)
};

// Block i's attention: 0 when dense, else the block-local block size.
// Dense iff i % int(1 / dense_rate) == 0 or i is the designated dense block
// (upstream truncates non-reciprocal rates).
int64_t attention_block(const EngineOptions& o, int64_t i);

// An embed's read-out widths: the centroid embedding's (e) and, in block
// mode, each channel's slice (per_channel; full mode: 0). WeatherGenerator
// widens the centroid part so the channels divide the rest. Throws
// std::invalid_argument, naming the stream and the keys, where a block
// read-out would leave the channels no slice (model_options calls it).
struct EmbedReadout {
  int64_t centroid_width = 0;
  int64_t per_channel = 0;
};
EmbedReadout embed_readout(const EmbedOptions& o);

// The local-to-global adapter (ae_local_global_engine).
struct AdapterOptions {
  int64_t dim_q = 0;       // D_g
  int64_t dim_kv = 0;      // D_l
  int64_t num_queries = 1;
  int64_t num_heads = 16;
  int64_t dim_head = 128;  // ae_adapter_embed
  bool qk_norm = true;
  bool with_residual = true;
  double dropout = 0.0;
  double norm_eps = 1e-4;
  double mlp_norm_eps = 1e-5;
};

// One stream's decoder: embed_target_coords, target_token_engines, pred_heads.
struct DecoderOptions {
  std::string stream;
  int64_t dim_coords = 105;       // targets_coords_size: 105 + geoinfos
  int64_t dim_embed = 256;        // embed_target_coords.dim_embed
  int64_t num_layers = 2;         // target_readout.num_layers
  int64_t num_heads = 4;          // the FIRST stream's target_readout.num_heads (as upstream)
  int64_t dim_head = 0;           // target_readout.dim_head_proj (0: dim_embed / num_heads)
  double mlp_hidden_factor = 2;   // target_readout.mlp_hidden_factor
  double dropout = 0.1;           // pred_dropout_rate (upstream: fixed 0.1)
  int64_t dim_latent = 2048;      // ae_global_dim_embed
  bool self_attention = true;     // pred_self_attention
  bool mlp_adaln = true;          // pred_mlp_adaln
  double norm_eps = 1e-4;
  double mlp_norm_eps = 1e-5;
  int64_t num_target_channels = 0;
  int64_t ens_size = 1;           // pred_head.ens_size
  int64_t head_layers = 1;        // pred_head.num_layers
  std::string final_activation = "Identity";
};

struct ModelOptions {
  int healpix_level = 5;
  int64_t dim_local = 1024;   // ae_local_dim_embed
  int64_t dim_global = 2048;  // ae_global_dim_embed
  int64_t num_queries = 1;    // ae_local_num_queries
  std::vector<EmbedOptions> embeds;      // per stream with source tokens (not diagnostic)
  EngineOptions local;
  AdapterOptions adapter;
  EngineOptions aggregation;
  EngineOptions global;
  EngineOptions forecast;                // num_blocks 0: no forecast engine
  int64_t forecast_offset = 0;           // the step index of the first target step (AdaLayerNorm's aux)
  std::vector<DecoderOptions> decoders;  // per stream
  double impute_latent_noise_std = 0.0;
};

// The options a run's configuration gives for streams of these shapes (in
// config order). Throws std::invalid_argument for a stream without source
// channels that is not diagnostic.
ModelOptions model_options(const Config& config, const std::vector<StreamShape>& shapes);

}  // namespace wg
