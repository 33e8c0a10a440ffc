// WeatherGenerator's model (see header). The forward follows wg-model.md §4
// and its Appendix A step by step; the chunked local loop of upstream is
// left out (every operation in it is per token or per cell, so it is
// numerically neutral), and empty cells never reach an attention call.
#include "wg/model/weather_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace wg {

namespace {
// Upstream's forecast engine starts from N(0, 0.001) weights and biases.
void small_init(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.normal_(0.0, 0.001);
}

torch::Tensor recorded(const torch::Tensor& t) { return t.detach().clone(); }
}  // namespace

WeatherModelImpl::WeatherModelImpl(const ModelOptions& o) : o_(o) {
  tables_ = ModelTables::build(o.healpix_level, o.dim_local, o.dim_global, o.num_queries);
  // Construction (and so random initialisation) in upstream's order.
  for (const auto& d : o.decoders) {
    int index = -1;
    for (size_t e = 0; e < o.embeds.size(); ++e)
      if (o.embeds[e].stream == d.stream) index = int(e);
    embed_of_stream_.push_back(index);
  }
  for (const auto& e : o.embeds) embeds_.emplace_back(e);
  ae_local_ = LocalEngine(o.local);
  ae_adapter_ = Adapter(o.adapter);
  const torch::Tensor q = torch::rand({1, o.num_queries, o.dim_global}) / double(o.dim_global);
  ae_aggregation_ = TransformerEngine(o.aggregation);
  ae_global_ = TransformerEngine(o.global);
  forecast_ = TransformerEngine(o.forecast);
  small_init(*forecast_);
  for (const auto& d : o.decoders) {
    coords_.emplace_back(d.dim_coords, d.dim_embed);
    decoders_.emplace_back(d);
    heads_.emplace_back(d);
  }
  // Registration in state_dict order (own parameters come first).
  q_cells = register_parameter("q_cells", q);
  auto embed_engine = register_module("embed_engine", std::make_shared<torch::nn::Module>());
  auto embeds = embed_engine->register_module("embeds", std::make_shared<torch::nn::Module>());
  for (size_t s = 0; s < embeds_.size(); ++s) embeds->register_module(o.embeds[s].stream, embeds_[s]);
  register_module("ae_local_engine", ae_local_);
  register_module("ae_local_global_engine", ae_adapter_);
  register_module("ae_aggregation_engine", ae_aggregation_);
  register_module("ae_global_engine", ae_global_);
  register_module("forecast_engine", forecast_);
  auto coords = register_module("embed_target_coords", std::make_shared<torch::nn::Module>());
  auto engines = register_module("target_token_engines", std::make_shared<torch::nn::Module>());
  auto heads = register_module("pred_heads", std::make_shared<torch::nn::Module>());
  for (size_t s = 0; s < decoders_.size(); ++s) {
    const std::string& name = o.decoders[s].stream;
    coords->register_module(name, coords_[s]);
    engines->register_module(name, decoders_[s]);
    heads->register_module(name, heads_[s]);
    pred_keys_.push_back(PieceKey::io("pred", name, PieceKind::Input));
    for (const auto& k : decoders_[s]->block_keys()) pred_keys_.push_back(k);
    pred_keys_.push_back(PieceKey::io("pred", name, PieceKind::Head));
  }
  pred_modes_.assign(pred_keys_.size(), PieceMode::Keep);
}

void WeatherModelImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  torch::nn::Module::to(device, dtype, non_blocking);
  place_fused();
}
void WeatherModelImpl::to(torch::Dtype dtype, bool non_blocking) {
  torch::nn::Module::to(dtype, non_blocking);
  place_fused();
}
void WeatherModelImpl::to(torch::Device device, bool non_blocking) {
  torch::nn::Module::to(device, non_blocking);
  place_fused();
}

void WeatherModelImpl::place_fused() {
  for (const auto& m : modules(/*include_self=*/false)) {
    if (auto* self = dynamic_cast<SelfAttentionImpl*>(m.get())) self->place_fused();
    if (auto* cross = dynamic_cast<CrossAttentionImpl*>(m.get())) cross->place_fused();
  }
}

void WeatherModelImpl::set_plan(const RecomputePlan& plan) {
  for (auto& e : embeds_) e->set_plan(plan);
  ae_local_->set_plan(plan);
  ae_adapter_->set_plan(plan);
  ae_aggregation_->set_plan(plan);
  ae_global_->set_plan(plan);
  forecast_->set_plan(plan);
  pred_modes_ = piece_modes(pred_keys_, plan);
}

std::vector<PieceKey> WeatherModelImpl::piece_keys() const {
  std::vector<PieceKey> keys;
  for (const auto& e : embeds_)
    for (const auto& k : e->piece_keys()) keys.push_back(k);
  for (const std::vector<PieceKey>& engine : {ae_local_->piece_keys(), ae_adapter_->piece_keys(),
                                              ae_aggregation_->piece_keys(), ae_global_->piece_keys(),
                                              forecast_->piece_keys()})
    keys.insert(keys.end(), engine.begin(), engine.end());
  keys.insert(keys.end(), pred_keys_.begin(), pred_keys_.end());
  return keys;
}

void WeatherModelImpl::set_observer(PieceObserver* observer) {
  observer_ = observer;
  for (auto& e : embeds_) e->set_observer(observer);
  ae_local_->set_observer(observer);
  ae_adapter_->set_observer(observer);
  ae_aggregation_->set_observer(observer);
  ae_global_->set_observer(observer);
  forecast_->set_observer(observer);
}

torch::Tensor WeatherModelImpl::embed_tokens(const ModelBatch& batch) {
  // Every stream's tokens of every sample, embedded, plus pe_embed at their
  // position in the cell, scattered into the cell-ordered buffer [M, D_l].
  std::vector<torch::Tensor> rows, values;
  for (size_t s = 0; s < batch.streams.size(); ++s) {
    const StreamBatchTensors& sb = batch.streams[s];
    const int e = embed_of_stream_.at(s);
    for (size_t b = 0; b < sb.source_tokens.size(); ++b) {
      if (sb.source_tokens[b].size(0) == 0) continue;
      TORCH_CHECK(sb.idxs_embed_pe[b].numel() == 0 || sb.idxs_embed_pe[b].max().item<int64_t>() < kPeEmbedRows,
                  "stream '", sb.name, "': a cell holds more than ", kPeEmbedRows,
                  " source tokens, beyond pe_embed (upstream indexes out of range there)");
      TORCH_CHECK(e >= 0, "stream '", sb.name, "' is diagnostic but has source tokens");
      const torch::Tensor y = embeds_[size_t(e)]->forward(sb.source_tokens[b], sb.source_centroids[b]).flatten(0, 1);
      values.push_back(y + tables_.pe_embed.index_select(0, sb.idxs_embed_pe[b]));
      rows.push_back(sb.idxs_embed[b]);
    }
  }
  const torch::Tensor buffer = torch::zeros({batch.num_tokens, o_.dim_local}, q_cells.options());
  if (rows.empty()) return buffer;
  return buffer.index_copy(0, torch::cat(rows), torch::cat(values));
}

torch::Tensor WeatherModelImpl::aggregate(const torch::Tensor& queries, const std::vector<int64_t>& per_sample) {
  // Each sample's non-empty cells form one sequence; the query slot acts as the batch.
  // (split, whose backward concatenates, not narrow, whose backward zero-fills the whole batch)
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& sample : queries.split_with_sizes(per_sample, 0))
    if (sample.size(0) > 0) out.push_back(ae_aggregation_->forward(sample.permute({1, 0, 2})).permute({1, 0, 2}));
  return out.empty() ? queries : torch::cat(out);
}

std::vector<torch::Tensor> WeatherModelImpl::predict(const ModelBatch& batch, int64_t step, const torch::Tensor& latent,
                                                     int& nan_dropped) {
  const int64_t B = batch.num_samples, C = batch.num_cells, nq = o_.num_queries;
  // Each target cell reads the nq tokens of itself and its 8 neighbours (SW..S).
  const torch::Tensor nb = tables_.hp_nbours.flatten();
  std::vector<torch::Tensor> per_sample;
  for (int64_t b = 0; b < B; ++b) per_sample.push_back(nb + b * C);
  // The decoders' keys and values: rows kv_rows of the latent's tokens
  // ([B·C·nq, D_g]): a cell's 9 neighbourhood cells, nq tokens each
  // ([B·9C·nq]), gathered after each layer's norm and product.
  const torch::Tensor tokens = latent.reshape({B * C * nq, o_.dim_global});
  const torch::Tensor kv_rows =
      (torch::cat(per_sample).unsqueeze(1) * nq + torch::arange(nq, nb.options()).unsqueeze(0)).flatten();
  const std::vector<int64_t> nine(size_t(B * C), 9 * nq);
  std::vector<torch::Tensor> preds;
  size_t first_key = 0;
  for (size_t s = 0; s < decoders_.size(); ++s) {
    const StreamBatchTensors& sb = batch.streams[s];
    const size_t keys = decoders_[s]->block_keys().size() + 2;
    const torch::Tensor coords = sb.target_coords[size_t(step)];
    const std::vector<int64_t>& lens = sb.target_lens[size_t(step)];
    if (coords.size(0) == 0) {
      preds.emplace_back();
      first_key += keys;
      continue;
    }
    const VarlenSegments to_latent = VarlenSegments::from_lengths(lens, nine, coords.device());
    const VarlenSegments within = VarlenSegments::from_lengths(lens, lens, coords.device());
    auto coord_embed = coords_[s];
    auto head = heads_[s];
    // As upstream: a coordinate embedding with a NaN (NaN coordinates, or
    // the embedding diverged) gives no prediction for the stream this step.
    const auto embedded_nan = std::make_shared<bool>(false);  // set by the piece's first run
    std::vector<Piece> pieces;
    pieces.push_back({pred_keys_[first_key],
                      [coord_embed, embedded_nan](const torch::Tensor& tc, Saving) mutable {
                        torch::Tensor e = coord_embed->forward(tc);
                        *embedded_nan = *embedded_nan || e.isnan().any().item<bool>();
                        return e;
                      },
                      coord_embed->parameters(), pred_modes_[first_key]});
    decoders_[s]->add_pieces(pieces, pred_modes_, first_key + 1, tokens, kv_rows, coords, to_latent, within);
    pieces.push_back({pred_keys_[first_key + keys - 1], [head](const torch::Tensor& e, Saving) mutable { return head->forward(e); },
                      head->parameters(), pred_modes_[first_key + keys - 1]});
    torch::Tensor pred = run_pieces(pieces, coords, observer_);
    if (*embedded_nan) {
      spdlog::warn("stream '{}': NaN in the embedded target coordinates; no prediction (as upstream)", sb.name);
      pred = torch::Tensor();
      ++nan_dropped;
    }
    preds.push_back(pred);
    first_key += keys;
  }
  return preds;
}

ModelOutput WeatherModelImpl::forward(const ModelBatch& batch, bool record_sections) {
  const int64_t B = batch.num_samples, C = batch.num_cells, nq = o_.num_queries, Dg = o_.dim_global;
  TORCH_CHECK(C == tables_.num_cells, "model: the batch has ", C, " cells per sample, the model ", tables_.num_cells);
  TORCH_CHECK(batch.streams.size() == decoders_.size(), "model: the batch has ", batch.streams.size(),
              " streams, the model ", decoders_.size());
  if (tables_.pe_embed.device() != q_cells.device()) tables_ = tables_.to(q_cells.device());
  const torch::Tensor& pe_global = tables_.pe_global;
  ModelOutput out;
  const auto record = [&](const std::string& name, const torch::Tensor& t) {
    if (record_sections) out.sections[name] = recorded(t);
  };
  const torch::Device device = q_cells.device();

  torch::Tensor tokens = embed_tokens(batch);  // [M, D_l]
  record("embed", tokens);
  tokens = ae_local_->forward(tokens, VarlenSegments::from_lengths(batch.source_cell_lens, batch.source_cell_lens, device));
  record("ae_local", tokens);

  // One query per cell (and slot): q_cells + pe_global, for every sample.
  const torch::Tensor q0 = q_cells.repeat({C, 1, 1}) + pe_global;  // [C, nq, D_g]
  const torch::Tensor q_all = B == 1 ? q0 : q0.repeat({B, 1, 1});    // [B·C, nq, D_g]
  std::vector<int64_t> non_empty, kv_lens, per_sample(size_t(B), 0);
  for (int64_t g = 0; g < B * C; ++g)
    if (batch.source_cell_lens[size_t(g)] > 0) {
      non_empty.push_back(g);
      kv_lens.push_back(batch.source_cell_lens[size_t(g)]);
      ++per_sample[size_t(g / C)];
    }
  torch::Tensor latent = q_all;
  if (!non_empty.empty()) {
    const torch::Tensor cells = torch::tensor(non_empty, torch::kInt64).to(device);
    torch::Tensor queries = q_all.index_select(0, cells);  // [n, nq, D_g]
    queries = ae_adapter_->forward(
        queries, tokens, VarlenSegments::from_lengths(std::vector<int64_t>(non_empty.size(), 1), kv_lens, device));
    record("ae_adapter", queries);
    queries = aggregate(queries, per_sample);
    record("ae_aggregation", queries);
    latent = q_all.index_copy(0, cells, queries);
  }
  // Non-empty cells carry aggregated + pe_global, empty ones q_cells + 2 pe_global (as upstream).
  latent = (latent.view({B, C, nq, Dg}) + pe_global).reshape({B, C * nq, Dg});
  latent = ae_global_->forward(latent);
  record("ae_global", latent);

  // Target steps forecast_offset .. F-1 are predicted; between two, the
  // forecast engine advances the latent by one step (its aux: the step).
  const int64_t first = o_.forecast_offset, last = batch.num_target_steps() - 1;
  for (int64_t f = first; f < last; ++f) {
    out.preds.push_back(predict(batch, f, latent, out.nan_dropped));
    if (is_training() && o_.impute_latent_noise_std > 0)
      latent = latent + torch::randn_like(latent) * latent.norm() * o_.impute_latent_noise_std;
    const torch::Tensor step = torch::full({1}, double(f), latent.options());
    latent = forecast_->forward(latent, step);
    record("forecast." + std::to_string(f), latent);
  }
  if (last >= first) out.preds.push_back(predict(batch, last, latent, out.nan_dropped));
  return out;
}

}  // namespace wg
