// Building one stream of one sample: spoof → tokenise → mask → targets
// (wg-data.md §1), in masking and in forecast mode.
#include "wg/data/stream_sample.h"

#include "wg/data/pipeline_error.h"
#include "wg/data/tokenizer.h"

namespace wg {

namespace {

// Upstream tokenises only streams with source channels and ≥ 2 points (§4.1).
bool has_source_tokens(const StreamTokenConfig& cfg, const PointSet& source) {
  return !cfg.diagnostic && source.num_channels > 0 && source.size() >= 2;
}

// §3.4: an empty point set is replaced by one point per cell carrying the
// raw channel means; `spoofed` holds it.
const PointSet& spoof_if_empty(const HealpixGrid& grid, const PointSet& points, const std::vector<double>& means,
                               int64_t window_start, const std::string& stream, const char* which, PointSet& spoofed,
                               bool& is_spoof) {
  is_spoof = points.empty();
  if (!is_spoof) return points;
  if (static_cast<int>(means.size()) != points.num_channels) {
    throw PipelineError(stream, std::string("spoof means (") + which + ")",
                        "has " + std::to_string(means.size()) + " channel means for " +
                            std::to_string(points.num_channels) + " channels");
  }
  spoofed = spoof_points(grid, means, points.num_geoinfos, window_start);
  return spoofed;
}

bool same_points(const PointSet& a, const PointSet& b) {
  return a.lat == b.lat && a.lon == b.lon && a.times == b.times;
}

void init_sample(const StreamTokenConfig& cfg, const PointSet& source, const PointSet& target, const SampleKey& key,
                 StreamSample& out) {
  out.stream = cfg.name;
  out.sample_id = key.sample_id;
  out.token_size = cfg.token_size;
  out.source_width = source.num_channels > 0 ? row_width(source.num_geoinfos, source.num_channels) : 0;
  out.num_target_channels = target.num_channels;
  out.target_coord_width = target_coord_width(target.num_geoinfos);
}

}  // namespace

void fill_source(const HealpixGrid& grid, const PointSet& points, const TokenPartition& partition,
                 const TokenMask* mask, int64_t window_start, StreamSample& out) {
  const int64_t nt = partition.num_tokens();
  const int64_t nc = grid.num_cells();
  const bool channel = mask != nullptr && !mask->all_masked && mask->strategy == MaskStrategy::Channel;
  std::vector<uint8_t> keep(nt, 1);
  if (mask != nullptr && !channel) {
    for (int64_t t = 0; t < nt; ++t) keep[t] = mask->all_masked ? 0 : !mask->token[t];
  }
  out.source_tokens.clear();
  append_source_token_rows(grid, points, partition, window_start, keep, /*nan_to_zero=*/true, out.source_tokens);
  const int width = row_width(points.num_geoinfos, points.num_channels);
  const int ts = partition.token_size;
  if (channel) {
    const int first = kRowLeadColumns + points.num_geoinfos;
    for (int64_t t = 0; t < nt; ++t) {
      const uint8_t* m = &mask->channel[t * mask->num_channels];
      for (int r = 0; r < ts; ++r) {
        float* row = &out.source_tokens[(t * ts + r) * width + first];
        for (int j = 0; j < mask->num_channels; ++j) {
          if (m[j]) row[j] = 0.0f;
        }
      }
    }
  }
  out.source_lens.assign(nc, 0);
  std::vector<int64_t> token_cells;
  token_cells.reserve(nt);
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t t = partition.cell_token_start[c]; t < partition.cell_token_start[c + 1]; ++t) {
      if (!keep[t]) continue;
      ++out.source_lens[c];
      token_cells.push_back(c);
    }
  }
  out.source_centroids = source_centroids(grid, token_cells);
}

StreamSample build_masking_sample(const HealpixGrid& grid, const StreamTokenConfig& cfg, const MaskingConfig& masking,
                                  MaskStrategy strategy, const PointSet& source, const PointSet& target,
                                  int64_t window_start, const SpoofMeans& means, const SampleKey& key) {
  StreamSample out;
  build_masking_sample(grid, cfg, masking, strategy, source, target, window_start, means, key, out);
  return out;
}

void build_masking_sample(const HealpixGrid& grid, const StreamTokenConfig& cfg, const MaskingConfig& masking,
                          MaskStrategy strategy, const PointSet& source, const PointSet& target, int64_t window_start,
                          const SpoofMeans& means, const SampleKey& key, StreamSample& out) {
  PointSet spoofed_source;
  PointSet spoofed_target;
  const PointSet* src = &spoof_if_empty(grid, source, means.source, window_start, cfg.name, "source", spoofed_source,
                                        out.source_is_spoof);
  const PointSet* tgt = &spoof_if_empty(grid, target, means.target, window_start, cfg.name, "target", spoofed_target,
                                        out.target_is_spoof);
  init_sample(cfg, *src, *tgt, key, out);
  const int64_t nc = grid.num_cells();

  TokenPartition src_part;
  TokenMask mask;
  if (has_source_tokens(cfg, *src)) {
    src_part = partition_points(grid, *src, cfg.token_size, cfg.tokenize_spacetime, cfg.name);
    PipelineRng rng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::Mask);
    mask = draw_token_mask(masking, strategy, src_part, src->num_channels, grid.level(), rng);
    fill_source(grid, *src, src_part, &mask, window_start, out);
  } else {
    // No source tokens: nothing is visible, so every target point is a
    // target (upstream reuses the previous stream's mask here, §12.4).
    mask = all_masked_mask(strategy);
    out.source_tokens.clear();
    out.source_centroids.clear();
    out.source_lens.assign(nc, 0);
  }
  out.strategy = mask.strategy;
  out.masking_rate = mask.rate;

  // Source and target of a masking stream normally are the same points:
  // tokenise them once.
  const bool reuse = !src_part.token_start.empty() && same_points(*src, *tgt);
  TokenPartition tgt_part_own;
  if (!reuse) tgt_part_own = partition_points(grid, *tgt, cfg.token_size, cfg.tokenize_spacetime, cfg.name);
  const TokenPartition& tgt_part = reuse ? src_part : tgt_part_own;

  TargetSelection sel = mask_target(mask, src_part, tgt_part);
  PipelineRng sampling_rng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::TargetSampling, 0);
  PipelineRng cap_rng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::TargetCap, 0);
  sel = subsample_targets(sel, nc, cfg.sampling_rate_target, cfg.max_num_targets, sampling_rng, cap_rng);
  out.targets.resize(1);
  fill_step_targets(grid, *tgt, tgt_part.point_cell, sel, &mask, window_start, out.targets[0]);
}

StreamSample build_forecast_sample(const HealpixGrid& grid, const StreamTokenConfig& cfg, const PointSet& source,
                                   int64_t source_window_start, const std::vector<PointSet>& targets,
                                   const std::vector<int64_t>& target_window_starts, const SpoofMeans& means,
                                   const SampleKey& key) {
  StreamSample out;
  PointSet spoofed_source;
  const PointSet* src = &spoof_if_empty(grid, source, means.source, source_window_start, cfg.name, "source",
                                        spoofed_source, out.source_is_spoof);
  const PointSet& first_target = targets.empty() ? *src : targets[0];
  init_sample(cfg, *src, first_target, key, out);
  const int64_t nc = grid.num_cells();
  if (has_source_tokens(cfg, *src)) {
    const TokenPartition part = partition_points(grid, *src, cfg.token_size, cfg.tokenize_spacetime, cfg.name);
    fill_source(grid, *src, part, nullptr, source_window_start, out);
  } else {
    out.source_lens.assign(nc, 0);
  }
  out.strategy = MaskStrategy::Random;
  out.masking_rate = 0.0;
  for (size_t f = 0; f < targets.size(); ++f) {
    PointSet spoofed_target;
    bool spoofed = false;
    const PointSet* tgt = &spoof_if_empty(grid, targets[f], means.target, target_window_starts[f], cfg.name, "target",
                                          spoofed_target, spoofed);
    out.target_is_spoof = out.target_is_spoof || spoofed;
    std::vector<int64_t> cells(tgt->size());
    for (size_t i = 0; i < cells.size(); ++i) cells[i] = grid.cell_of(tgt->lat[i], tgt->lon[i]);
    PipelineRng sampling_rng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::TargetSampling, f);
    PipelineRng order_rng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::ForecastOrder, f);
    PipelineRng cap_rng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::TargetCap, f);
    TargetSelection sel = forecast_targets(cells, nc, cfg.sampling_rate_target, sampling_rng, order_rng);
    if (cfg.max_num_targets > 0) sel = cap_targets_from_draws(sel, cfg.max_num_targets, cap_rng.permutation(nc));
    out.targets.push_back(build_step_targets(grid, *tgt, cells, sel, nullptr, target_window_starts[f]));
  }
  return out;
}

}  // namespace wg
