// The whole network (see header).
#include "wg/model/weather_model.h"

#include <algorithm>

namespace wg {

EmbedOptions embed_options(const Config& c, const StreamConfig& s, const StreamShape& shape) {
  EmbedOptions o;
  o.stream = s.name;
  o.num_tokens = s.embed.num_tokens;
  o.token_size = shape.token_size;
  o.num_channels = shape.num_channels;
  o.dim_embed = s.embed.dim_embed;
  o.dim_out = c.ae_local_dim_embed;
  o.num_blocks = s.embed.num_blocks;
  o.num_heads = s.embed.num_heads;
  o.dropout_rate = c.embed_dropout_rate;
  o.dropout_final_rate = c.embed_dropout_final_rate;
  o.norm_type = c.norm_type;
  o.embed_size_centroids = c.embed_size_centroids;
  o.unembed_mode = c.embed_unembed_mode;
  o.bf16_attention_on_cuda = c.with_mixed_precision && c.attention_dtype == "bf16";
  return o;
}

LatentAdapterImpl::LatentAdapterImpl(int dim_in, int dim, int num_streams) {
  proj_in = register_module("proj_in", torch::nn::Linear(dim_in, dim));
  mask_token = register_parameter("mask_token", torch::randn({dim}) * 0.02);
  stream_embed = register_parameter("stream_embed", torch::randn({num_streams, dim}) * 0.02);
  embed_coords = register_module("embed_coords", torch::nn::Linear(kCentroidFeatures, dim));
}

torch::Tensor LatentAdapterImpl::forward(const torch::Tensor& emb, const torch::Tensor& visible,
                                         const torch::Tensor& centroids, int64_t B, int64_t T, int stream) {
  const int64_t nt = emb.size(1), D = mask_token.size(0);
  torch::Tensor h = proj_in(emb);                                        // [Nv, nt, D]
  torch::Tensor all = mask_token.view({1, 1, D}).expand({B * T, nt, D});  // [B*T, nt, D]
  all = all.contiguous().index_copy(0, visible, h);                     // own memory per token
  all = all + embed_coords(centroids).unsqueeze(1);                      // where each token is, masked or not
  return all.reshape({B, T * nt, D}) + harmonic_encoding(T * nt, D, all.options()) + stream_embed[stream];
}

WeatherModelImpl::WeatherModelImpl(const Config& c, const std::vector<StreamShape>& shapes)
    : streams_(c.streams), dim_latent_(c.ae_global_dim_embed) {
  TORCH_CHECK(shapes.size() == streams_.size(), "model: ", shapes.size(), " stream shapes for ", streams_.size(),
              " streams");
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> embeds, heads;
  for (size_t i = 0; i < streams_.size(); ++i) {
    const StreamConfig& s = streams_[i];
    TORCH_CHECK(shapes[i].name == s.name, "model: the shape of stream '", shapes[i].name, "' given for '", s.name, "'");
    embeds.emplace_back(s.name, StreamEmbedTransformer(embed_options(c, s, shapes[i])).ptr());
    const int head_in = s.embed.num_tokens * c.ae_global_dim_embed;
    heads.emplace_back(s.name, PredHead(head_in, c.pred_mlp_hidden_factor * c.ae_global_dim_embed,
                                        shapes[i].token_size * shapes[i].num_channels).ptr());
  }
  auto embed_engine = register_module("embed_engine", std::make_shared<torch::nn::Module>());
  embeds_ = embed_engine->register_module("embeds", torch::nn::ModuleDict(embeds));
  pred_heads = register_module("pred_heads", torch::nn::ModuleDict(heads));
  latent_adapter = register_module(
      "latent_adapter", LatentAdapter(c.ae_local_dim_embed, c.ae_global_dim_embed, int(streams_.size())));
  LatentOptions lo;
  lo.dim = c.ae_global_dim_embed;
  lo.num_blocks = c.ae_global_num_blocks;
  lo.num_heads = c.ae_global_num_heads;
  lo.mlp_hidden_factor = c.ae_global_mlp_hidden_factor;
  lo.dropout_rate = c.ae_global_dropout_rate;
  lo.norm_type = c.norm_type;
  lo.bf16_attention_on_cuda = c.with_mixed_precision && c.attention_dtype == "bf16";
  latent_engine = register_module("latent_engine", LatentEngine(lo));
}

void WeatherModelImpl::set_plan(const RecomputePlan& plan) {
  for (const auto& s : streams_) {
    embeds_->at<StreamEmbedTransformerImpl>(s.name).set_plan(plan);
    pred_heads->at<PredHeadImpl>(s.name).set_plan(plan);
  }
  latent_engine->set_plan(plan);
}

std::vector<PieceKey> WeatherModelImpl::piece_keys() const {
  std::vector<PieceKey> keys;
  const auto add = [&keys](const std::vector<PieceKey>& more) {
    for (const auto& k : more)
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  };
  for (const auto& s : streams_) add(embeds_->at<StreamEmbedTransformerImpl>(s.name).piece_keys());
  add(latent_engine->piece_keys());
  for (const auto& s : streams_) add(pred_heads->at<PredHeadImpl>(s.name).piece_keys());
  return keys;
}

void WeatherModelImpl::set_observer(PieceObserver* observer) {
  for (const auto& s : streams_) {
    embeds_->at<StreamEmbedTransformerImpl>(s.name).set_observer(observer);
    pred_heads->at<PredHeadImpl>(s.name).set_observer(observer);
  }
  latent_engine->set_observer(observer);
}

std::vector<torch::Tensor> WeatherModelImpl::forward(const ModelInput& in) {
  const int64_t B = in.batch_size;
  std::vector<torch::Tensor> latent_parts;  // [B, T_s*nt_s, D] per stream
  std::vector<int64_t> part_len;
  for (size_t s = 0; s < in.streams.size(); ++s) {
    const StreamInput& si = in.streams[s];
    const int64_t T = si.values.size(1), ts = si.values.size(2), C = si.values.size(3);
    auto& embed = embeds_->at<StreamEmbedTransformerImpl>(si.stream);
    torch::Tensor x_in = si.values.reshape({B * T, ts, C}).index_select(0, si.visible);  // [Nv, ts, C]
    torch::Tensor cen_all = si.centroids.reshape({B * T, -1});                           // [B*T, 5]
    torch::Tensor emb = embed.forward(x_in, cen_all.index_select(0, si.visible));        // [Nv, nt, dim_out]
    latent_parts.push_back(latent_adapter->forward(emb, si.visible, cen_all, B, T, int(s)));
    part_len.push_back(latent_parts.back().size(1));
  }
  torch::Tensor latent = latent_engine->forward(torch::cat(latent_parts, 1));  // [B, L, D]
  std::vector<torch::Tensor> preds;
  int64_t offset = 0;
  for (size_t s = 0; s < in.streams.size(); ++s) {
    const StreamInput& si = in.streams[s];
    const int64_t T = si.values.size(1), ts = si.values.size(2), C = si.values.size(3);
    torch::Tensor part = latent.narrow(1, offset, part_len[s]).reshape({B * T, -1});  // [B*T, nt*D]
    offset += part_len[s];
    torch::Tensor out = pred_heads->at<PredHeadImpl>(si.stream).forward(part.index_select(0, si.masked));
    preds.push_back(out.view({-1, ts, C}));  // [Nm, ts, C]
  }
  return preds;
}

}  // namespace wg
