// Target subsampling, forecast-mode selection and the per-point target
// arrays (wg-data.md §6.2–6.4, §10). Compiled with -ffp-contract=off: the
// target coordinates are binary32 expressions with a cancellation
// (1 − (R·P)_x) that an FMA would change.
#include "wg/data/targets.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "wg/data/tokenizer.h"

namespace wg {

namespace {

constexpr float kDegToRad32 = static_cast<float>(M_PI / 180.0);

// e_x − R·P, binary32.
void local_of(const float* r, const float p[3], float* out) {
  const float x = r[0] * p[0] + r[1] * p[1] + r[2] * p[2];
  const float y = r[3] * p[0] + r[4] * p[1] + r[5] * p[2];
  const float z = r[6] * p[0] + r[7] * p[1] + r[8] * p[2];
  out[0] = 1.0f - x;
  out[1] = 0.0f - y;
  out[2] = 0.0f - z;
}

// Keeps the points with keep[p] != 0; cell_lens recounted from `sel`'s.
TargetSelection filter_selection(const TargetSelection& sel, const std::vector<uint8_t>& keep) {
  TargetSelection out;
  out.cell_lens.assign(sel.cell_lens.size(), 0);
  int64_t p = 0;
  for (size_t c = 0; c < sel.cell_lens.size(); ++c) {
    for (int32_t j = 0; j < sel.cell_lens[c]; ++j, ++p) {
      if (!keep[p]) continue;
      out.points.push_back(sel.points[p]);
      if (!sel.mask_token.empty()) out.mask_token.push_back(sel.mask_token[p]);
      ++out.cell_lens[c];
    }
  }
  return out;
}

}  // namespace

TargetSelection sample_targets_from_draws(const TargetSelection& sel, double rate,
                                          const std::vector<double>& uniforms) {
  std::vector<uint8_t> keep(sel.points.size());
  for (size_t p = 0; p < keep.size(); ++p) keep[p] = uniforms[p] < rate;
  return filter_selection(sel, keep);
}

TargetSelection cap_targets_from_draws(const TargetSelection& sel, int64_t max_num_targets,
                                       const std::vector<int64_t>& cell_order) {
  const size_t nc = sel.cell_lens.size();
  std::vector<uint8_t> cell_kept(nc, 0);
  int64_t total = 0;
  size_t taken = 0;
  for (; taken < cell_order.size(); ++taken) {
    const int64_t c = cell_order[taken];
    if (total + sel.cell_lens[c] > max_num_targets) break;
    total += sel.cell_lens[c];
    cell_kept[c] = 1;
  }
  std::vector<uint8_t> keep(sel.points.size(), 0);
  std::vector<int64_t> cell_start(nc + 1, 0);
  for (size_t c = 0; c < nc; ++c) cell_start[c + 1] = cell_start[c] + sel.cell_lens[c];
  for (size_t c = 0; c < nc; ++c) {
    if (cell_kept[c]) std::fill(keep.begin() + cell_start[c], keep.begin() + cell_start[c + 1], 1);
  }
  // The first cell in cell_order already exceeds the cap: keep its first
  // max_num_targets points rather than nothing.
  if (taken == 0 && !cell_order.empty() && max_num_targets > 0) {
    const int64_t c = cell_order[0];
    std::fill(keep.begin() + cell_start[c], keep.begin() + cell_start[c] + max_num_targets, 1);
  }
  return filter_selection(sel, keep);
}

TargetSelection subsample_targets(const TargetSelection& sel, int64_t num_cells, double sampling_rate_target,
                                  int64_t max_num_targets, PipelineRng& sampling_rng, PipelineRng& cap_rng) {
  TargetSelection out = sel;
  if (sampling_rate_target < 1.0) {
    std::vector<double> u(out.points.size());
    for (double& v : u) v = sampling_rng.uniform();
    out = sample_targets_from_draws(out, sampling_rate_target, u);
  }
  if (max_num_targets > 0) out = cap_targets_from_draws(out, max_num_targets, cap_rng.permutation(num_cells));
  return out;
}

TargetSelection forecast_targets_from_draws(const std::vector<int64_t>& point_cell, int64_t num_cells, double rate,
                                            const std::vector<double>& keep_uniforms,
                                            const std::vector<int64_t>& within_cell_perms) {
  const int64_t n = static_cast<int64_t>(point_cell.size());
  TargetSelection sel;
  sel.cell_lens.assign(num_cells, 0);
  std::vector<int64_t> kept;
  kept.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    if (keep_uniforms.empty() || keep_uniforms[i] < rate) {
      kept.push_back(i);
      ++sel.cell_lens[point_cell[i]];
    }
  }
  std::vector<int64_t> start(num_cells + 1, 0);
  for (int64_t c = 0; c < num_cells; ++c) start[c + 1] = start[c] + sel.cell_lens[c];
  std::vector<int64_t> by_cell(kept.size());
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (const int64_t i : kept) by_cell[fill[point_cell[i]]++] = i;
  }
  sel.points.resize(kept.size());
  // within_cell_perms[k] is relative to its cell's start.
  for (int64_t c = 0; c < num_cells; ++c) {
    for (int64_t k = start[c]; k < start[c + 1]; ++k) sel.points[k] = by_cell[start[c] + within_cell_perms[k]];
  }
  return sel;
}

TargetSelection forecast_targets(const std::vector<int64_t>& point_cell, int64_t num_cells, double rate,
                                 PipelineRng& sampling_rng, PipelineRng& order_rng) {
  std::vector<double> u;
  if (rate < 1.0) {
    u.resize(point_cell.size());
    for (double& v : u) v = sampling_rng.uniform();
  }
  std::vector<int64_t> counts(num_cells, 0);
  for (size_t i = 0; i < point_cell.size(); ++i) {
    if (u.empty() || u[i] < rate) ++counts[point_cell[i]];
  }
  std::vector<int64_t> perms;
  perms.reserve(point_cell.size());
  for (int64_t c = 0; c < num_cells; ++c) {
    if (counts[c] == 0) continue;
    const std::vector<int64_t> p = order_rng.permutation(counts[c]);
    perms.insert(perms.end(), p.begin(), p.end());
  }
  return forecast_targets_from_draws(point_cell, num_cells, rate, u, perms);
}

namespace {

// The point-dependent part of §6.3 (everything after the geoinfos). [99]
void spatial_target_coordinates(const HealpixGrid& grid, float lat_deg, float lon_deg, int64_t cell, float* o) {
  const float theta = (90.0f - lat_deg) * kDegToRad32;
  const float phi = (180.0f + lon_deg) * kDegToRad32;
  const float st = std::sin(theta);
  const float p[3] = {st * std::cos(phi), st * std::sin(phi), std::cos(theta)};
  const float* vl = &grid.verts_local()[cell * kNumVertices * 12];
  for (int k = 0; k < kNumVertices; ++k) {
    local_of(grid.rotation(k, cell), p, o + 15 * k);
    std::copy_n(vl + 12 * k, 12, o + 15 * k + 3);
  }
  for (int nb = 0; nb < kNumNeighbours; ++nb) local_of(grid.neighbour_rotation(nb, cell), p, o + 75 + 3 * nb);
}

}  // namespace

void target_coordinates(const HealpixGrid& grid, float lat_deg, float lon_deg, int64_t cell, int64_t time,
                        int64_t window_start, const float* geoinfos, int num_geoinfos, float* out) {
  out[0] = 0.0f;
  target_time_features(time, window_start, out + 1);
  std::copy_n(geoinfos, num_geoinfos, out + 6);
  spatial_target_coordinates(grid, lat_deg, lon_deg, cell, out + 6 + num_geoinfos);
}

StepTargets build_step_targets(const HealpixGrid& grid, const PointSet& points, const std::vector<int64_t>& point_cell,
                               const TargetSelection& sel, const TokenMask* mask, int64_t window_start) {
  StepTargets st;
  fill_step_targets(grid, points, point_cell, sel, mask, window_start, st);
  return st;
}

void fill_step_targets(const HealpixGrid& grid, const PointSet& points, const std::vector<int64_t>& point_cell,
                       const TargetSelection& sel, const TokenMask* mask, int64_t window_start, StepTargets& st) {
  const int g = points.num_geoinfos;
  const int nch = points.num_channels;
  const int cw = target_coord_width(g);
  const size_t np = sel.points.size();
  st.window_start = window_start;
  // Appended (reserve + insert) rather than zero-filled and overwritten.
  st.values.clear();
  st.coords.clear();
  st.coords_raw.clear();
  st.times.clear();
  st.values.reserve(np * nch);
  st.coords.reserve(np * cw);
  st.coords_raw.reserve(np * 2);
  st.times.reserve(np);
  st.cell_lens = sel.cell_lens;
  const bool channel_masked = mask != nullptr && !sel.mask_token.empty();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> row(cw, 0.0f);
  bool have_time = false;
  int64_t cached_time = 0;
  for (size_t p = 0; p < np; ++p) {
    const int64_t i = sel.points[p];
    const size_t at = st.values.size();
    st.values.insert(st.values.end(), points.data.begin() + i * nch, points.data.begin() + (i + 1) * nch);
    if (channel_masked && sel.mask_token[p] >= 0) {
      // Only the channels hidden from the source are targets (§5.5).
      const uint8_t* m = &mask->channel[sel.mask_token[p] * mask->num_channels];
      for (int j = 0; j < nch; ++j) {
        if (!m[j]) st.values[at + j] = nan;
      }
    }
    if (!have_time || points.times[i] != cached_time) {
      have_time = true;
      cached_time = points.times[i];
      target_time_features(cached_time, window_start, &row[1]);
    }
    std::copy_n(points.geoinfos.data() + i * g, g, &row[6]);
    zero_nan(&row[6], g);  // as in the source rows (upstream: the stream's prediction would be lost)
    spatial_target_coordinates(grid, points.lat[i], points.lon[i], point_cell[i], &row[6 + g]);
    st.coords.insert(st.coords.end(), row.begin(), row.end());
    st.coords_raw.push_back(points.lat[i]);
    st.coords_raw.push_back(points.lon[i]);
    st.times.push_back(points.times[i]);
  }
}

}  // namespace wg
