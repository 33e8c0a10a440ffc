// The step dump (see header and docs/step-dump.md).
#include "wg/train/step_dump.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "wg/io/safetensors.h"
#include "wg/io/weights.h"
#include "wg/train/batch_tensors.h"
#include "wg/train/trainer.h"

namespace wg {

namespace {
using json = nlohmann::json;

json loss_mode(const LossConfig& l) {
  json fcts = json::array();
  for (const LossTerm& t : l.loss_fcts) fcts.push_back({t.name, t.weight});
  return {{"losses", {{"LossPhysical", {{"weight", l.weight}, {"loss_fcts", fcts}}}}}};
}

// The model keys under WeatherGenerator's names, and the streams as the twin reads them.
json model_json(const Config& c, const std::vector<StreamShape>& shapes) {
  json m = {
      {"healpix_level", c.healpix_level}, {"embed_orientation", c.embed_orientation},
      {"embed_size_centroids", c.embed_size_centroids}, {"embed_unembed_mode", c.embed_unembed_mode},
      {"embed_dropout_rate", c.embed_dropout_rate}, {"pred_dropout_rate", c.pred_dropout_rate}, {"target_cell_local_prediction", c.target_cell_local_prediction},
      {"ae_local_dim_embed", c.ae_local_dim_embed}, {"ae_local_num_blocks", c.ae_local_num_blocks},
      {"ae_local_num_heads", c.ae_local_num_heads}, {"ae_local_dropout_rate", c.ae_local_dropout_rate},
      {"ae_local_with_qk_lnorm", c.ae_local_with_qk_lnorm}, {"ae_local_num_queries", c.ae_local_num_queries},
      {"ae_local_queries_per_cell", c.ae_local_queries_per_cell}, {"ae_adapter_num_heads", c.ae_adapter_num_heads},
      {"ae_adapter_embed", c.ae_adapter_embed}, {"ae_adapter_with_qk_lnorm", c.ae_adapter_with_qk_lnorm},
      {"ae_adapter_with_residual", c.ae_adapter_with_residual}, {"ae_adapter_dropout_rate", c.ae_adapter_dropout_rate},
      {"ae_global_dim_embed", c.ae_global_dim_embed}, {"ae_global_num_blocks", c.ae_global_num_blocks},
      {"ae_global_num_heads", c.ae_global_num_heads}, {"ae_global_dropout_rate", c.ae_global_dropout_rate},
      {"ae_global_with_qk_lnorm", c.ae_global_with_qk_lnorm}, {"ae_global_att_dense_rate", c.ae_global_att_dense_rate},
      {"ae_global_block_factor", c.ae_global_block_factor},
      {"ae_global_mlp_hidden_factor", c.ae_global_mlp_hidden_factor},
      {"ae_aggregation_num_blocks", c.ae_aggregation_num_blocks},
      {"ae_aggregation_num_heads", c.ae_aggregation_num_heads},
      {"ae_aggregation_dropout_rate", c.ae_aggregation_dropout_rate},
      {"ae_aggregation_with_qk_lnorm", c.ae_aggregation_with_qk_lnorm},
      {"ae_aggregation_att_dense_rate", c.ae_aggregation_att_dense_rate},
      {"ae_aggregation_block_factor", c.ae_aggregation_block_factor},
      {"ae_aggregation_mlp_hidden_factor", c.ae_aggregation_mlp_hidden_factor}, {"decoder_type", c.decoder_type},
      {"pred_adapter_kv", c.pred_adapter_kv}, {"pred_self_attention", c.pred_self_attention},
      {"pred_dyadic_dims", c.pred_dyadic_dims}, {"pred_mlp_adaln", c.pred_mlp_adaln},
      {"forecast_offset", c.forecast_offset}, {"forecast_steps", c.forecast_steps},
      {"forecast_policy", c.forecast_policy.empty() ? json(nullptr) : json(c.forecast_policy)},
      {"forecast_att_dense_rate", c.forecast_att_dense_rate}, {"fe_num_blocks", c.fe_num_blocks},
      {"fe_num_heads", c.fe_num_heads}, {"fe_dropout_rate", c.fe_dropout_rate},
      {"fe_with_qk_lnorm", c.fe_with_qk_lnorm}, {"impute_latent_noise_std", c.impute_latent_noise_std},
      {"norm_type", c.norm_type}, {"norm_eps", c.norm_eps}, {"mlp_norm_eps", c.mlp_norm_eps},
      {"latent_noise_kl_weight", c.latent_noise_kl_weight}, {"training_mode", c.training_mode},
      {"training_mode_config", loss_mode(c.training_loss)}, {"validation_mode_config", loss_mode(c.validation_loss)},
  };
  json streams = json::array();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const StreamConfig& s = c.streams[i];
    json weights = nullptr;
    if (!s.channel_weights.empty()) {
      weights = json::array();
      for (const std::string& ch : shapes[i].target_channels) {
        double w = 1.0;
        for (const auto& [name, value] : s.channel_weights)
          if (name == ch) w = value;
        weights.push_back(w);
      }
    }
    streams.push_back({
        {"name", s.name}, {"token_size", s.token_size}, {"sources_size", shapes[i].source_width()},
        {"targets_num_channels", shapes[i].num_target_channels()},
        {"targets_coords_size", shapes[i].target_coord_width()}, {"diagnostic", s.diagnostic},
        {"tokenize_spacetime", s.tokenize_spacetime},
        {"embed", {{"net", s.embed.net}, {"num_tokens", s.embed.num_tokens}, {"num_heads", s.embed.num_heads},
                   {"dim_embed", s.embed.dim_embed}, {"num_blocks", s.embed.num_blocks}}},
        {"embed_target_coords", {{"net", s.embed_target_coords.net}, {"dim_embed", s.embed_target_coords.dim_embed}}},
        {"target_readout",
         {{"type", s.target_readout.type}, {"num_layers", s.target_readout.num_layers},
          {"num_heads", s.target_readout.num_heads}, {"mlp_hidden_factor", s.target_readout.mlp_hidden_factor},
          {"dim_head_proj", s.target_readout.dim_head_proj > 0 ? json(s.target_readout.dim_head_proj) : json(nullptr)},
          {"softcap", s.target_readout.softcap}}},
        {"pred_head", {{"ens_size", s.pred_head.ens_size}, {"num_layers", s.pred_head.num_layers},
                       {"final_activation", s.pred_head.final_activation}}},
        {"loss_weight", s.loss_weight}, {"channel_weights", weights},
    });
  }
  m["streams"] = streams;
  return m;
}

// Integers as I64; floating point as F32, or F64 for a float64 dump.
struct Writer {
  SafetensorsFile f;
  bool float64 = false;
  void add(const std::string& name, const torch::Tensor& t) {
    if (!t.is_floating_point()) {
      f.tensors.push_back(to_record(name, t.to(torch::kCPU, torch::kInt64), DType::I64));
    } else {
      const auto dtype = float64 ? torch::kFloat64 : torch::kFloat32;
      f.tensors.push_back(to_record(name, t.to(torch::kCPU, dtype), float64 ? DType::F64 : DType::F32));
    }
  }
};

template <class T>
torch::Tensor longs(const std::vector<T>& v) {
  return torch::tensor(std::vector<int64_t>(v.begin(), v.end()), torch::kInt64);
}
}  // namespace

double write_step_dump(const std::string& path, Trainer& trainer, const Config& config, const BuiltBatch& batch,
                       int64_t step, bool float64) {
  WeatherModel& model = trainer.model();
  const auto& shapes = trainer.dataset().stream_shapes();
  const torch::Device device = model->parameters().front().device();
  Writer w;
  w.float64 = float64;
  SafetensorsFile& f = w.f;
  f.metadata["format"] = "wgtrain-step-dump/1";
  f.metadata["model"] = model_json(config, shapes).dump();
  f.metadata["batch_size"] = std::to_string(batch.layout.num_samples);
  f.metadata["num_cells"] = std::to_string(batch.layout.num_cells);
  f.metadata["forecast_steps"] = std::to_string(batch.layout.num_forecast_steps - config.forecast_offset);  // predicted steps
  f.metadata["step"] = std::to_string(step);

  for (const auto& p : model->named_parameters()) w.add("params." + p.key(), p.value().detach());
  const ModelTables& tables = model->tables();
  w.add("tables.pe_embed", tables.pe_embed);
  w.add("tables.pe_global", tables.pe_global);
  w.add("tables.hp_nbours", tables.hp_nbours);

  const BatchLayout& L = batch.layout;
  const int64_t B = L.num_samples, S = L.num_streams;
  w.add("batch.source_cell_lens", longs(L.source_cell_lens));
  for (int64_t s = 0; s < S; ++s) {
    const std::string& name = shapes[size_t(s)].name;
    for (size_t k = 0; k < L.target_coords_idx[size_t(s)].size(); ++k)
      w.add("batch." + name + ".target_coords_idxs." + std::to_string(k), longs(L.target_coords_idx[size_t(s)][k]));
    for (int64_t b = 0; b < B; ++b) {
      const StreamSample& x = batch.samples[size_t(b)][size_t(s)];
      const std::string p = "batch." + std::to_string(b) + "." + name + ".";
      const int64_t n = x.num_source_tokens();
      if (n > 0)
        w.add(p + "source_tokens_cells",
            torch::from_blob(const_cast<float*>(x.source_tokens.data()), {n, x.token_size, x.source_width}, torch::kFloat32));
      w.add(p + "source_tokens_lens", longs(x.source_lens));
      if (n > 0) {
        w.add(p + "source_centroids", torch::from_blob(const_cast<float*>(x.source_centroids.data()), {n, 5}, torch::kFloat32));
        w.add(p + "source_idxs_embed", longs(L.idxs_embed[size_t(b * S + s)]));
        w.add(p + "source_idxs_embed_pe", longs(L.idxs_embed_pe[size_t(b * S + s)]));
      }
      for (size_t k = 0; k < x.targets.size(); ++k) {
        const StepTargets& t = x.targets[k];
        const int64_t P = t.num_points();
        if (P == 0) continue;
        w.add(p + "target_coords." + std::to_string(k),
            torch::from_blob(const_cast<float*>(t.coords.data()), {P, x.target_coord_width}, torch::kFloat32));
        w.add(p + "target_tokens." + std::to_string(k),
            torch::from_blob(const_cast<float*>(t.values.data()), {P, x.num_target_channels}, torch::kFloat32));
        w.add(p + "target_times." + std::to_string(k), longs(t.times));
      }
      w.add(p + "target_weight", torch::tensor(x.source_is_spoof || x.target_is_spoof ? 0.0f : 1.0f));
    }
  }

  // The step, dropout off (eval mode: the model has no other train-only behaviour but latent noise).
  ModelBatch input = to_model_batch(batch, device);
  if (float64) {  // exact both ways: float32 -> float64 -> float32
    model->to(torch::kFloat64);
    for (auto& s : input.streams) {
      for (auto& t : s.source_tokens) t = t.to(torch::kFloat64);
      for (auto& t : s.source_centroids) t = t.to(torch::kFloat64);
      for (auto& t : s.target_coords) t = t.to(torch::kFloat64);
      for (auto& t : s.target_values) t = t.to(torch::kFloat64);
    }
  }
  const auto restore = [&] {
    model->train();
    if (float64) model->to(torch::kFloat32);
  };
  model->eval();
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  double loss_value = 0;
  try {
    ModelOutput out = model->forward(input, /*record_sections=*/true);
    for (const auto& [name, t] : out.sections) w.add("out." + name, t);
    for (size_t i = 0; i < out.preds.size(); ++i)
      for (int64_t s = 0; s < S; ++s)
        if (out.preds[i][size_t(s)].defined())
          w.add("out.pred." + shapes[size_t(s)].name + "." + std::to_string(config.forecast_offset + int64_t(i)),
              out.preds[i][size_t(s)].detach());
    const PhysicalLoss loss(config, config.training_loss, shapes, true);
    const PhysicalLossResult r = loss(input, out.preds);
    if (!r.loss.defined()) throw std::runtime_error("--dump-step: no stream of the batch has target data");
    r.loss.backward();
    loss_value = r.loss.item<double>();
    w.add("loss", r.loss.detach());
    for (const auto& p : model->named_parameters())
      if (p.value().grad().defined()) w.add("grads." + p.key(), p.value().grad());
  } catch (...) {
    restore();
    throw;
  }
  restore();
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  write_safetensors(path, f);
  return loss_value;
}

}  // namespace wg
