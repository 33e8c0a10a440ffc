// The points of one stream in one time window, as a reader delivers them
// (WeatherGenerator's ReaderData; wg-data.md §3.1.4, §3.3, §9): reader
// order (anemoi: time-major, then grid index; obs: row order), NaN
// coordinates already removed, channels and geoinfos already normalised.
// Every stream type (synthetic, anemoi, obs) hands the tokeniser this.
// No LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wg {

struct PointSet {
  int num_geoinfos = 0;          // G
  int num_channels = 0;          // data channels of this set (source or target channels)
  std::vector<float> lat;        // [N] degrees, float32 as the reader produced them
  std::vector<float> lon;        // [N] degrees
  std::vector<float> geoinfos;   // [N, G] normalised
  std::vector<float> data;       // [N, num_channels] normalised; NaN where the store has no value
  std::vector<int64_t> times;    // [N] seconds since 1970-01-01 UTC

  size_t size() const { return lat.size(); }
  bool empty() const { return lat.empty(); }
};

}  // namespace wg
