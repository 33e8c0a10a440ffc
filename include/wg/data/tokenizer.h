// Tokenisation of one stream's points (wg-data.md §4, §6.1): which point
// goes into which token, and the rows the source tokens and the targets are
// made of.
//
// Invariants:
// - Token order = cell order (NESTED 0..Ncell−1), then, with
//   tokenize_spacetime, ascending time stamp, then θ-chunk order; inside a
//   token, θ32 ascending (north → south), ties by reader order. One
//   TokenPartition describes both the padded source tokens and the unpadded
//   target tokens of the same points.
// - Source rows: [stream id 0, 5 time features, 2 cell-local coordinates,
//   geoinfos, source channels] (§4.2), width 8 + G + n_src; padding rows
//   (at the end of the last token of a (cell[, time]) group) are all zero.
// - Target rows: [0, 5 target time values, raw lat°, lon°, geoinfos, target
//   channels] (§6.1), width 8 + G + n_tgt, no padding.
// - Time features use s = (t − window start) mod 86400 seconds and a 12 h
//   period, as upstream (§4.2, §12.10).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wg/data/healpix.h"
#include "wg/data/points.h"

namespace wg {

constexpr int kTimeFeatures = 5;
constexpr int kRowLeadColumns = 8;     // stream id, 5 time features, 2 coordinates
constexpr int kCentroidWidth = 5;      // x, y, z, lat, lon of the cell centre
constexpr int kTargetCoordBase = 105;  // target coordinate width without geoinfos (§6.3)

inline int row_width(int num_geoinfos, int num_channels) { return kRowLeadColumns + num_geoinfos + num_channels; }
inline int target_coord_width(int num_geoinfos) { return kTargetCoordBase + num_geoinfos; }

// Which points form which token (upstream's hpy_splits, §4.3–4.4).
struct TokenPartition {
  int token_size = 0;
  int64_t num_cells = 0;
  std::vector<int64_t> point_cell;        // [N] NESTED cell of every point (§2.2)
  std::vector<int64_t> order;             // [N] point indices in token order
  std::vector<int64_t> token_start;       // [T + 1] token t = order[token_start[t] .. token_start[t+1])
  std::vector<int64_t> cell_token_start;  // [Ncell + 1] the tokens of cell c are [cell_token_start[c], …[c+1])

  int64_t num_tokens() const { return static_cast<int64_t>(token_start.size()) - 1; }
  int32_t cell_tokens(int64_t c) const { return static_cast<int32_t>(cell_token_start[c + 1] - cell_token_start[c]); }
  int64_t token_points(int64_t t) const { return token_start[t + 1] - token_start[t]; }
};

// Throws PipelineError naming `stream` for a non-finite coordinate.
TokenPartition partition_points(const HealpixGrid& grid, const PointSet& points, int token_size,
                                bool tokenize_spacetime, const std::string& stream);

// NaN values of v[0 .. n) set to 0 (the source rows' data and geoinfos, the
// target coordinates' geoinfos).
void zero_nan(float* v, int n);

// Source features of one point: the 5 time values and the 2 cell-local
// coordinates (§4.2, including upstream's radians-as-degrees quirk §12.1).
void source_time_features(int64_t time, int64_t window_start, float out[kTimeFeatures]);
void target_time_features(int64_t time, int64_t window_start, float out[kTimeFeatures]);
void source_local_coords(const HealpixGrid& grid, float lat_deg, float lon_deg, int64_t cell, float out[2]);

// Rows of the tokens with keep[t] != 0 (all tokens when keep is empty), in
// token order, padded to token_size rows. With nan_to_zero, NaN geoinfos and
// data become 0 as they are copied (§4.6: the source tensor has no NaN; the
// computed columns are always finite). [T_kept, ts, 8 + G + n_src]
std::vector<float> source_token_rows(const HealpixGrid& grid, const PointSet& points, const TokenPartition& partition,
                                     int64_t window_start, const std::vector<uint8_t>& keep = {},
                                     bool nan_to_zero = false);
// The same, appended to `rows` (a caller that reuses one buffer per stream
// avoids re-faulting tens of MB per sample).
void append_source_token_rows(const HealpixGrid& grid, const PointSet& points, const TokenPartition& partition,
                              int64_t window_start, const std::vector<uint8_t>& keep, bool nan_to_zero,
                              std::vector<float>& rows);

// Target rows (§6.1) of the given points, in the given order. [P, 8 + G + n_tgt]
std::vector<float> target_point_rows(const PointSet& points, const std::vector<int64_t>& point_indices,
                                     int64_t window_start);

// Source centroids (§4.6, errata 1) of tokens in the given cells. [T, 5]
std::vector<float> source_centroids(const HealpixGrid& grid, const std::vector<int64_t>& token_cells);

// §3.4: one point per cell at the cell centre (lat°, lon° ∈ [0, 360), the
// HEALPix φ frame — upstream's quirk §12.8 kept), zero geoinfos, the raw
// (un-normalised) channel means as data, time = window start.
PointSet spoof_points(const HealpixGrid& grid, const std::vector<double>& raw_channel_means, int num_geoinfos,
                      int64_t window_start);

}  // namespace wg
