// A run's configuration and its streams' shapes -> the model's options
// (wg-model.md §6.5). Upstream's quirks that a trained model depends on
// are kept and named where they happen.
#include "wg/model/model_options.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace wg {

namespace {
EngineOptions engine(std::string section, std::string blocks_name, int64_t dim, int64_t blocks, int64_t heads,
                     double dropout, bool qk_norm, double dense_rate, int64_t block_factor, double mlp_factor,
                     const Config& c) {
  EngineOptions e;
  e.section = std::move(section);
  e.blocks_name = std::move(blocks_name);
  e.dim = dim;
  e.num_blocks = blocks;
  e.num_heads = heads;
  e.dropout = dropout;
  e.qk_norm = qk_norm;
  e.norm_eps = c.norm_eps;
  e.mlp_norm_eps = c.mlp_norm_eps;
  e.dense_rate = dense_rate;
  e.block_factor = block_factor;
  e.mlp_hidden_factor = mlp_factor;
  e.last_dense_block = blocks - 1;
  return e;
}
}  // namespace

int64_t attention_block(const EngineOptions& o, int64_t i) {
  const int64_t every = std::max<int64_t>(1, int64_t(1.0 / o.dense_rate));
  return (i % every == 0 || i == o.last_dense_block) ? 0 : o.block_factor;
}

EmbedReadout embed_readout(const EmbedOptions& o) {
  const int64_t total = int64_t(o.num_tokens) * o.dim_out;
  if (o.unembed_mode != "block") return {o.embed_size_centroids, 0};
  const int64_t e = o.embed_size_centroids + (total - o.embed_size_centroids) % o.num_channels;
  const int64_t per_channel = (total - e) / o.num_channels;
  if (per_channel < 1)  // a configuration that cannot be built: an error of the run's configuration
    throw std::invalid_argument(
        "stream '" + o.stream + "': embed.num_tokens (" + std::to_string(o.num_tokens) + ") x ae_local_dim_embed (" +
        std::to_string(o.dim_out) + ") - embed_size_centroids (" + std::to_string(o.embed_size_centroids) +
        ") must be at least the stream's " + std::to_string(o.num_channels) +
        " input features per point (embed_unembed_mode block gives each one a slice); raise ae_local_dim_embed");
  return {e, per_channel};
}

ModelOptions model_options(const Config& c, const std::vector<StreamShape>& shapes) {
  if (shapes.size() != c.streams.size())
    throw std::invalid_argument("model: " + std::to_string(shapes.size()) + " stream shapes for " +
                                std::to_string(c.streams.size()) + " configured streams");
  ModelOptions o;
  o.healpix_level = c.healpix_level;
  o.dim_local = c.ae_local_dim_embed;
  o.dim_global = c.ae_global_dim_embed;
  o.num_queries = c.ae_local_num_queries;
  o.impute_latent_noise_std = c.impute_latent_noise_std;
  o.forecast_offset = c.forecast_offset;

  for (size_t i = 0; i < shapes.size(); ++i) {
    const StreamConfig& s = c.streams[i];
    const StreamShape& shape = shapes[i];
    if (shape.diagnostic) continue;  // upstream: Identity, no parameters
    if (shape.source_channels.empty())
      throw std::invalid_argument("stream '" + s.name + "' (" + s.origin.str() +
                                  "): no source channel is selected; set `diagnostic: True` for a stream that is "
                                  "only predicted");
    EmbedOptions e;
    e.stream = s.name;
    e.num_tokens = s.embed.num_tokens;
    e.token_size = shape.token_size;
    e.num_channels = shape.source_width();
    e.dim_embed = s.embed.dim_embed;
    e.dim_out = c.ae_local_dim_embed;
    e.num_blocks = s.embed.num_blocks;
    e.num_heads = s.embed.num_heads;
    e.dropout_rate = c.embed_dropout_rate;
    e.dropout_final_rate = c.embed_dropout_final_rate;
    e.norm_type = c.norm_type;
    e.embed_size_centroids = c.embed_size_centroids;
    e.unembed_mode = c.embed_unembed_mode;
    embed_readout(e);  // the read-out's widths fit: checked here, before anything is built
    o.embeds.push_back(e);
  }

  o.local = engine("ae_local", "ae_local_blocks", c.ae_local_dim_embed, c.ae_local_num_blocks, c.ae_local_num_heads,
                   c.ae_local_dropout_rate, c.ae_local_with_qk_lnorm, 1.0, 0, 2, c);

  o.adapter.dim_q = c.ae_global_dim_embed;
  o.adapter.dim_kv = c.ae_local_dim_embed;
  o.adapter.num_queries = c.ae_local_num_queries;
  o.adapter.num_heads = c.ae_adapter_num_heads;
  o.adapter.dim_head = c.ae_adapter_embed;
  o.adapter.qk_norm = c.ae_adapter_with_qk_lnorm;
  o.adapter.with_residual = c.ae_adapter_with_residual;
  o.adapter.dropout = c.ae_adapter_dropout_rate;
  o.adapter.norm_eps = c.norm_eps;
  o.adapter.mlp_norm_eps = c.mlp_norm_eps;

  o.aggregation = engine("ae_aggregation", "ae_aggregation_blocks", c.ae_global_dim_embed, c.ae_aggregation_num_blocks,
                         c.ae_aggregation_num_heads, c.ae_aggregation_dropout_rate, c.ae_aggregation_with_qk_lnorm,
                         c.ae_aggregation_att_dense_rate, c.ae_aggregation_block_factor,
                         c.ae_aggregation_mlp_hidden_factor, c);
  o.global = engine("ae_global", "ae_global_blocks", c.ae_global_dim_embed, c.ae_global_num_blocks,
                    c.ae_global_num_heads, c.ae_global_dropout_rate, c.ae_global_with_qk_lnorm,
                    c.ae_global_att_dense_rate, c.ae_global_block_factor, c.ae_global_mlp_hidden_factor, c);
  // Upstream builds the forecast engine only with a forecast_policy, and
  // decides its last dense block by ae_global_num_blocks (wg-model.md §13.12).
  o.forecast = engine("forecast", "fe_blocks", c.ae_global_dim_embed, c.forecast_policy.empty() ? 0 : c.fe_num_blocks,
                      c.fe_num_heads, c.fe_dropout_rate, c.fe_with_qk_lnorm, c.forecast_att_dense_rate,
                      c.ae_global_block_factor, 2, c);
  o.forecast.last_dense_block = c.ae_global_num_blocks - 1;
  o.forecast.dim_aux = 1;

  for (size_t i = 0; i < shapes.size(); ++i) {
    const StreamConfig& s = c.streams[i];
    DecoderOptions d;
    d.stream = s.name;
    d.dim_coords = shapes[i].target_coord_width();
    d.dim_embed = s.embed_target_coords.dim_embed;
    d.num_layers = s.target_readout.num_layers;
    d.num_heads = c.streams.front().target_readout.num_heads;  // upstream reads streams[0] for every stream
    d.dim_head = s.target_readout.dim_head_proj;
    d.mlp_hidden_factor = s.target_readout.mlp_hidden_factor;
    d.dropout = c.pred_dropout_rate;
    d.dim_latent = c.ae_global_dim_embed;
    d.self_attention = c.pred_self_attention;
    d.mlp_adaln = c.pred_mlp_adaln;
    d.norm_eps = c.norm_eps;
    d.mlp_norm_eps = c.mlp_norm_eps;
    d.num_target_channels = shapes[i].num_target_channels();
    d.ens_size = s.pred_head.ens_size;
    d.head_layers = s.pred_head.num_layers;
    d.final_activation = s.pred_head.final_activation;
    o.decoders.push_back(d);
  }
  return o;
}

}  // namespace wg
