// PipelineFixture: runs the C++ pipeline piece by piece for every case,
// writes inputs, masks and draws for the numpy reference, runs it once and
// compares every output (see test_pipeline_harness.h).
#include "test_pipeline_harness.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace wg::testing_io {

namespace {

constexpr uint64_t kSeed = 20251213;
constexpr double kValueTol = 1e-6;

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

std::string number(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

void expect_same_targets(const StepTargets& a, const StepTargets& b, const std::string& what) {
  EXPECT_EQ(a.times, b.times) << what;
  EXPECT_EQ(a.cell_lens, b.cell_lens) << what;
  EXPECT_TRUE(near_all(a.coords, b.coords, 0.0)) << what;
  EXPECT_TRUE(near_all(a.values, b.values, 0.0)) << what;
  EXPECT_EQ(a.coords_raw, b.coords_raw) << what;
}

}  // namespace

void PipelineFixture::add_points(const std::string& name, PointSet coords,
                                 std::map<std::string, std::vector<float>> data, std::map<std::string, int> widths) {
  const int64_t n = static_cast<int64_t>(coords.size());
  npy::write(dir_ / (name + "_lat.npy"), coords.lat);
  npy::write(dir_ / (name + "_lon.npy"), coords.lon);
  npy::write(dir_ / (name + "_times.npy"), coords.times);
  npy::write(dir_ / (name + "_geo.npy"), coords.geoinfos, {n, coords.num_geoinfos});
  std::string entry = quoted(name) + ": {\"lat\": " + quoted(name + "_lat.npy") +
                      ", \"lon\": " + quoted(name + "_lon.npy") + ", \"times\": " + quoted(name + "_times.npy") +
                      ", \"geo\": " + quoted(name + "_geo.npy") + ", \"data\": {";
  bool first = true;
  for (auto& [dname, values] : data) {
    const int w = widths.at(dname);
    npy::write(dir_ / (name + "_" + dname + ".npy"), values, {n, w});
    entry += std::string(first ? "" : ", ") + quoted(dname) + ": " + quoted(name + "_" + dname + ".npy");
    first = false;
    PointSet p = coords;
    p.num_channels = w;
    p.data = std::move(values);
    sets_[name + "/" + dname] = std::move(p);
  }
  set_manifest_[name] = entry + "}}";
}

CaseResult PipelineFixture::run_case(const FixtureCase& c, std::string& entry) {
  const PointSet& src = points(c.points, c.source);
  const PointSet& tgt = points(c.points, c.target);
  const int64_t nc = grid_.num_cells();
  const SampleKey key{kSeed, 0, c.sample_id, 0};
  StreamTokenConfig cfg;
  cfg.name = c.name;
  cfg.token_size = c.token_size;
  cfg.tokenize_spacetime = c.spacetime;
  cfg.sampling_rate_target = c.sampling_rate_target;
  cfg.max_num_targets = c.max_num_targets;

  CaseResult r;
  r.partition = partition_points(grid_, src, c.token_size, c.spacetime, c.name);
  const TokenPartition tgt_part = partition_points(grid_, tgt, c.token_size, c.spacetime, c.name);
  entry = "{\"name\": " + quoted(c.name) + ", \"points\": " + quoted(c.points) + ", \"source\": " + quoted(c.source) +
          ", \"target\": " + quoted(c.target) + ", \"token_size\": " + std::to_string(c.token_size) +
          ", \"spacetime\": " + (c.spacetime ? "true" : "false") +
          ", \"window_start\": " + std::to_string(window_start) +
          ", \"sampling_rate_target\": " + number(c.sampling_rate_target) +
          ", \"max_num_targets\": " + std::to_string(c.max_num_targets);
  auto add_file = [&](const std::string& key_name, const std::string& file) {
    entry += ", " + quoted(key_name) + ": " + quoted(file);
  };
  r.sample.stream = c.name;
  if (!c.forecast) {
    PipelineRng rng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::Mask);
    r.mask = draw_token_mask(c.masking, c.masking.strategy, r.partition, src.num_channels, grid_.level(), rng);
    fill_source(grid_, src, r.partition, &r.mask, window_start, r.sample);
    r.selection = mask_target(r.mask, r.partition, tgt_part);
    entry += ", \"mode\": \"masking\", \"strategy\": " + quoted(to_string(r.mask.strategy)) +
             ", \"all_masked\": " + (r.mask.all_masked ? "true" : "false");
    std::vector<uint8_t> tm = r.mask.token;
    if (tm.empty()) tm.assign(r.partition.num_tokens(), 0);
    npy::write(dir_ / (c.name + "_token_masked.npy"), tm);
    add_file("token_masked", c.name + "_token_masked.npy");
    if (!r.mask.channel.empty()) {
      npy::write(dir_ / (c.name + "_channel_masked.npy"), r.mask.channel,
                 {r.partition.num_tokens(), r.mask.num_channels});
      add_file("channel_masked", c.name + "_channel_masked.npy");
    }
  } else {
    fill_source(grid_, src, r.partition, nullptr, window_start, r.sample);
    PipelineRng srng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::TargetSampling, 0);
    PipelineRng orng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::ForecastOrder, 0);
    std::vector<double> u;
    if (c.sampling_rate_target < 1.0) {
      for (size_t i = 0; i < tgt.size(); ++i) u.push_back(srng.uniform());
      npy::write(dir_ / (c.name + "_keep_uniforms.npy"), u);
      add_file("keep_uniforms", c.name + "_keep_uniforms.npy");
    }
    std::vector<int64_t> counts(nc, 0);
    for (size_t i = 0; i < tgt.size(); ++i) {
      if (u.empty() || u[i] < c.sampling_rate_target) ++counts[tgt_part.point_cell[i]];
    }
    std::vector<int64_t> perms;
    for (int64_t cell = 0; cell < nc; ++cell) {
      if (counts[cell] == 0) continue;
      const auto p = orng.permutation(counts[cell]);
      perms.insert(perms.end(), p.begin(), p.end());
    }
    npy::write(dir_ / (c.name + "_perms.npy"), perms);
    add_file("within_cell_perms", c.name + "_perms.npy");
    r.selection = forecast_targets_from_draws(tgt_part.point_cell, nc, c.sampling_rate_target, u, perms);
    entry += ", \"mode\": \"forecast\"";
  }
  if (!c.forecast && c.sampling_rate_target < 1.0) {
    PipelineRng srng(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::TargetSampling, 0);
    std::vector<double> u(r.selection.points.size());
    for (double& v : u) v = srng.uniform();
    r.selection = sample_targets_from_draws(r.selection, c.sampling_rate_target, u);
    npy::write(dir_ / (c.name + "_target_uniforms.npy"), u);
    add_file("target_uniforms", c.name + "_target_uniforms.npy");
  }
  if (c.max_num_targets > 0) {
    PipelineRng cap(key.seed, key.mini_epoch, key.sample_id, key.stream, RngPurpose::TargetCap, 0);
    const std::vector<int64_t> order = cap.permutation(nc);
    r.selection = cap_targets_from_draws(r.selection, c.max_num_targets, order);
    npy::write(dir_ / (c.name + "_cell_order.npy"), order);
    add_file("cell_order", c.name + "_cell_order.npy");
  }
  entry += "}";
  r.sample.targets.push_back(
      build_step_targets(grid_, tgt, tgt_part.point_cell, r.selection, c.forecast ? nullptr : &r.mask, window_start));

  // The one-call builders make exactly these draws and give the same sample.
  const SpoofMeans means;
  const StreamSample whole =
      c.forecast ? build_forecast_sample(grid_, cfg, src, window_start, {tgt}, {window_start}, means, key)
                 : build_masking_sample(grid_, cfg, c.masking, c.masking.strategy, src, tgt, window_start, means, key);
  EXPECT_TRUE(near_all(whole.source_tokens, r.sample.source_tokens, 0.0)) << c.name;
  EXPECT_EQ(whole.source_lens, r.sample.source_lens) << c.name;
  expect_same_targets(whole.targets.at(0), r.sample.targets[0], c.name);
  return r;
}

bool PipelineFixture::run() {
  std::string cases_json;
  for (const FixtureCase& c : cases_) {
    std::string entry;
    results_[c.name] = run_case(c, entry);
    cases_json += (cases_json.empty() ? "" : ",\n  ") + entry;
  }
  std::string sets_json;
  for (const auto& [name, entry] : set_manifest_) sets_json += (sets_json.empty() ? "" : ", ") + entry;
  std::string layouts_json;
  for (const auto& [name, samples] : layouts_) {
    std::string rows;
    for (const auto& row : samples) {
      std::string r;
      for (const auto& c : row) r += (r.empty() ? "" : ", ") + quoted(c);
      rows += (rows.empty() ? "[" : ", [") + r + "]";
    }
    layouts_json += (layouts_json.empty() ? "" : ", ") + std::string("{\"name\": ") + quoted(name) +
                    ", \"samples\": [" + rows + "]}";
  }
  std::ofstream(dir_ / "manifest.json") << "{\"level\": " << grid_.level() << ",\n \"pointsets\": {" << sets_json
                                        << "},\n \"cases\": [" << cases_json << "],\n \"layouts\": [" << layouts_json
                                        << "]}\n";
  return run_reference("run " + dir_.string());
}

void PipelineFixture::compare_case(const FixtureCase& c) {
  SCOPED_TRACE("case " + c.name);
  const CaseResult& r = results_.at(c.name);
  const std::string p = c.name + ".";
  const PointSet& src = points(c.points, c.source);
  const PointSet& tgt = points(c.points, c.target);
  EXPECT_TRUE(same_ints(r.partition.point_cell, ref<int64_t>(p + "cells.npy"))) << "cells";
  EXPECT_TRUE(same_ints(r.partition.order, ref<int64_t>(p + "order.npy"))) << "in-cell order";
  EXPECT_TRUE(same_ints(r.partition.token_start, ref<int64_t>(p + "token_start.npy"))) << "token boundaries";
  std::vector<int32_t> cell_tokens(grid_.num_cells());
  for (int64_t cell = 0; cell < grid_.num_cells(); ++cell) cell_tokens[cell] = r.partition.cell_tokens(cell);
  EXPECT_TRUE(same_ints(cell_tokens, ref<int32_t>(p + "cell_tokens.npy"))) << "tokens per cell";
  const auto tokens_cmp = near_all(r.sample.source_tokens, ref<float>(p + "src_tokens.npy"), kValueTol,
                                   row_width(src.num_geoinfos, src.num_channels));
  EXPECT_TRUE(tokens_cmp) << "source token rows";
  EXPECT_TRUE(same_ints(r.sample.source_lens, ref<int32_t>(p + "src_lens.npy"))) << "source lens";
  EXPECT_TRUE(near_all(r.sample.source_centroids, ref<float>(p + "centroids.npy"), kValueTol, 5)) << "centroids";
  const StepTargets& t = r.sample.targets[0];
  EXPECT_TRUE(same_ints(r.selection.points, ref<int64_t>(p + "tgt_points.npy"))) << "target points";
  EXPECT_TRUE(near_all(target_point_rows(tgt, r.selection.points, window_start), ref<float>(p + "tgt_rows.npy"),
                       kValueTol, row_width(tgt.num_geoinfos, tgt.num_channels)))
      << "target token rows (§6.1)";
  EXPECT_TRUE(near_all(t.values, ref<float>(p + "tgt_values.npy"), 0.0, tgt.num_channels)) << "target values";
  const auto coords_cmp =
      near_all(t.coords, ref<float>(p + "tgt_coords.npy"), kValueTol, target_coord_width(tgt.num_geoinfos));
  EXPECT_TRUE(coords_cmp) << "target coordinates";
  if (tokens_cmp && coords_cmp) {
    std::printf("  %-20s points %zu, tokens kept %lld / %lld, targets %lld; token rows %s, target coords %s\n",
                c.name.c_str(), src.size(), static_cast<long long>(r.sample.num_source_tokens()),
                static_cast<long long>(r.partition.num_tokens()), static_cast<long long>(t.num_points()),
                tokens_cmp.message(), coords_cmp.message());
  }
  EXPECT_TRUE(near_all(t.coords_raw, ref<float>(p + "tgt_raw.npy"), 0.0, 2)) << "raw target coordinates";
  EXPECT_TRUE(same_ints(t.times, ref<int64_t>(p + "tgt_times.npy"))) << "target times";
  EXPECT_TRUE(same_ints(t.cell_lens, ref<int32_t>(p + "tgt_lens.npy"))) << "target lens";
}

void PipelineFixture::compare_layout(const std::string& name, const std::vector<std::vector<std::string>>& samples) {
  SCOPED_TRACE("layout " + name);
  std::vector<std::vector<StreamSample>> batch;
  for (const auto& row : samples) {
    batch.emplace_back();
    for (const auto& c : row) batch.back().push_back(results_.at(c).sample);
  }
  const BatchLayout lay = layout_batch(batch);
  EXPECT_TRUE(same_ints(lay.source_cell_lens, ref<int32_t>(name + ".source_cell_lens.npy"))) << "source_cell_lens";
  const int64_t nb = lay.num_samples;
  const int64_t ns = lay.num_streams;
  for (int64_t s = 0; s < ns; ++s) {
    std::vector<int64_t> idx;
    std::vector<int32_t> pe;
    for (int64_t b = 0; b < nb; ++b) {
      idx.insert(idx.end(), lay.idxs_embed[b * ns + s].begin(), lay.idxs_embed[b * ns + s].end());
      pe.insert(pe.end(), lay.idxs_embed_pe[b * ns + s].begin(), lay.idxs_embed_pe[b * ns + s].end());
    }
    const std::string suffix = "." + std::to_string(s) + ".npy";
    EXPECT_TRUE(same_ints(idx, ref<int64_t>(name + ".idxs_embed" + suffix))) << "idxs_embed stream " << s;
    EXPECT_TRUE(same_ints(pe, ref<int32_t>(name + ".idxs_embed_pe" + suffix))) << "idxs_embed_pe stream " << s;
    EXPECT_TRUE(same_ints(lay.target_coords_idx[s][0], ref<int32_t>(name + ".target_coords_idx" + suffix)))
        << "target_coords_idx stream " << s;
  }
}

void PipelineFixture::compare_all() {
  for (const FixtureCase& c : cases_) compare_case(c);
  for (const auto& [name, samples] : layouts_) compare_layout(name, samples);
}

}  // namespace wg::testing_io
