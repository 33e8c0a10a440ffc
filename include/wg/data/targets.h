// Targets of one stream at one forecast step (wg-data.md §6, §10): the
// subsampling of the selected points (sampling_rate_target,
// max_num_targets), forecast-mode selection, and the per-point arrays the
// model and the loss consume, including the 105 + G target coordinates.
//
// Invariants:
// - Target order = cell order, then the order of the selection inside the
//   cell; every array below is in that order and cell_lens counts it.
// - Subsampling only removes points, never reorders them.
// - The random draws are parameters of the *_from_draws functions, so the
//   rules can be checked against a reference with the same draws; the
//   keyed-RNG versions make exactly those draws.
#pragma once

#include <cstdint>
#include <vector>

#include "wg/data/healpix.h"
#include "wg/data/masking.h"
#include "wg/data/pipeline_rng.h"
#include "wg/data/points.h"

namespace wg {

// Per-point arrays of one stream at one step. P = number of target points.
struct StepTargets {
  int64_t window_start = 0;        // seconds since 1970 of the target window
  std::vector<float> values;       // [P, n_tgt] normalised; NaN = no value (or unmasked channel)
  std::vector<float> coords;       // [P, 105 + G] §6.3
  std::vector<float> coords_raw;   // [P, 2] lat°, lon°
  std::vector<int64_t> times;      // [P] seconds since 1970 (exact, not recovered from the encoding)
  std::vector<int32_t> cell_lens;  // [Ncell] points per cell
  int64_t num_points() const { return static_cast<int64_t>(times.size()); }
};

// sampling_rate_target (§6.2 step 1): keep point p iff uniforms[p] < rate.
// uniforms: [P] one per selected point, in target order.
TargetSelection sample_targets_from_draws(const TargetSelection& sel, double rate, const std::vector<double>& uniforms);

// max_num_targets (§6.2 step 3): walk cells in cell_order, keep whole cells
// while the running count stays ≤ max_num_targets. If the first cell alone
// exceeds the limit, its first max_num_targets points (target order) are
// kept instead of upstream's malformed result (§12.12). cell_order: [Ncell].
TargetSelection cap_targets_from_draws(const TargetSelection& sel, int64_t max_num_targets,
                                       const std::vector<int64_t>& cell_order);

// Both steps with the stream's keyed generators (RngPurpose::TargetSampling,
// RngPurpose::TargetCap); no draw when rate ≥ 1 or max_num_targets ≤ 0.
TargetSelection subsample_targets(const TargetSelection& sel, int64_t num_cells, double sampling_rate_target,
                                  int64_t max_num_targets, PipelineRng& sampling_rng, PipelineRng& cap_rng);

// Forecast mode (§10): no masking. keep_uniforms: [N] (empty = keep all)
// filter u < rate on the points in reader order; then per cell (cells by
// point_cell, points in reader order) the order idx_c[perm_c], where
// within_cell_perms concatenates one permutation of [0, n_c) per non-empty
// cell in cell order (after the filter).
TargetSelection forecast_targets_from_draws(const std::vector<int64_t>& point_cell, int64_t num_cells, double rate,
                                            const std::vector<double>& keep_uniforms,
                                            const std::vector<int64_t>& within_cell_perms);
TargetSelection forecast_targets(const std::vector<int64_t>& point_cell, int64_t num_cells, double rate,
                                 PipelineRng& sampling_rng, PipelineRng& order_rng);

// §6.3 for one point of cell `cell`: [105 + G], geoinfos of the point.
void target_coordinates(const HealpixGrid& grid, float lat_deg, float lon_deg, int64_t cell, int64_t time,
                        int64_t window_start, const float* geoinfos, int num_geoinfos, float* out);

// The arrays of §6.3–6.4 for the selected points. Channel-masked selections
// (sel.mask_token non-empty) set the channels the mask kept visible to NaN.
// point_cell: [N] cell of every point of `points` (the partition's).
StepTargets build_step_targets(const HealpixGrid& grid, const PointSet& points, const std::vector<int64_t>& point_cell,
                               const TargetSelection& sel, const TokenMask* mask, int64_t window_start);
// The same into `out`, reusing its buffers.
void fill_step_targets(const HealpixGrid& grid, const PointSet& points, const std::vector<int64_t>& point_cell,
                       const TargetSelection& sel, const TokenMask* mask, int64_t window_start, StepTargets& out);

}  // namespace wg
