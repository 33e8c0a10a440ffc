// What the data layer resolved for a stream, and the model is built for:
// the points per token, the channels its source rows and targets carry
// (a file-backed stream's come from its store) and its geoinfo columns.
// No LibTorch.
#pragma once

#include <string>
#include <vector>

namespace wg {

// Per-point metadata columns of a source row before geoinfos and channels
// (wg-data.md §4.3: stream id, 5 time features, 2 cell-local coordinates).
constexpr int kSourceMetaColumns = 8;
// Target coordinate features before geoinfos (wg-data.md §6.3).
constexpr int kTargetCoordColumns = 105;

struct StreamShape {
  std::string name;
  int token_size = 0;
  bool diagnostic = false;                   // no source tokens
  int num_geoinfos = 0;                      // G
  std::vector<std::string> source_channels;  // [n_src]
  std::vector<std::string> target_channels;  // [n_tgt]

  // Features per point the embed transformer sees: 8 + G + n_src.
  int source_width() const { return kSourceMetaColumns + num_geoinfos + int(source_channels.size()); }
  // Target coordinate features per point: 105 + G.
  int target_coord_width() const { return kTargetCoordColumns + num_geoinfos; }
  int num_target_channels() const { return int(target_channels.size()); }
};

}  // namespace wg
