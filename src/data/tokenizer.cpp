// Tokenisation (wg-data.md §4, §6.1): the point → token partition and the
// float32 rows of source tokens and targets. Compiled with -ffp-contract=off
// so the binary32 expressions round exactly as upstream's torch ops.
#include "wg/data/tokenizer.h"

#include <algorithm>
#include <cmath>

#include "wg/data/pipeline_error.h"

namespace wg {

namespace {

constexpr float kPi32 = static_cast<float>(M_PI);
constexpr float kDegToRad32 = static_cast<float>(M_PI / 180.0);

int64_t floor_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return r < 0 ? r + b : r;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int64_t year_of_days(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t m = mp + (mp < 10 ? 3 : -9);
  return yoe + era * 400 + (m <= 2);
}

// a = ((s / 43200)·2)·π in binary32: the 12 h phase of §4.2.
float half_day_phase(int64_t time, int64_t window_start) {
  const float s = static_cast<float>(floor_mod(time - window_start, 86400));
  float a = s / 43200.0f;
  a = a * 2.0f;
  return a * kPi32;
}

// Token order visits a grid's points far from reader order: fetch the data
// row of a point a few points ahead so copying it does not wait on memory.
constexpr int64_t kPrefetchAhead = 8;
void prefetch_row(const float* row, int n) {
  for (int j = 0; j < n; j += 16) __builtin_prefetch(row + j);
}

// Sort key inside a cell: (time if spacetime, θ32), ties by reader order.
struct PointKey {
  int64_t time;
  float theta;
  int64_t index;
  bool operator<(const PointKey& o) const {
    if (time != o.time) return time < o.time;
    if (theta != o.theta) return theta < o.theta;
    return index < o.index;
  }
};

}  // namespace

void zero_nan(float* v, int n) {
  for (int j = 0; j < n; ++j) v[j] = v[j] == v[j] ? v[j] : 0.0f;
}

TokenPartition partition_points(const HealpixGrid& grid, const PointSet& points, int token_size,
                                bool tokenize_spacetime, const std::string& stream) {
  if (token_size <= 0) throw PipelineError(stream, "token_size", "must be positive, got " + std::to_string(token_size));
  const int64_t n = static_cast<int64_t>(points.size());
  const auto sized = [&](size_t got, int64_t per_point, const char* field) {
    if (got != static_cast<size_t>(n * per_point)) {
      throw PipelineError(
          stream, std::string("points.") + field,
          "has " + std::to_string(got) + " values for " + std::to_string(n) + " points × " + std::to_string(per_point));
    }
  };
  sized(points.lon.size(), 1, "lon");
  sized(points.times.size(), 1, "times");
  sized(points.geoinfos.size(), points.num_geoinfos, "geoinfos");
  sized(points.data.size(), points.num_channels, "data");
  const int64_t nc = grid.num_cells();
  TokenPartition p;
  p.token_size = token_size;
  p.num_cells = nc;
  p.point_cell.resize(n);
  std::vector<float> theta(n);
  for (int64_t i = 0; i < n; ++i) {
    const float lat = points.lat[i];
    const float lon = points.lon[i];
    if (!std::isfinite(lat) || !std::isfinite(lon)) {
      throw PipelineError(stream, "coordinates",
                          "point " + std::to_string(i) + " has a non-finite lat/lon (the reader must drop it)");
    }
    p.point_cell[i] = grid.cell_of(lat, lon);
    theta[i] = colatitude32(lat);
  }

  // Stable counting sort by cell: points of a cell in increasing reader index.
  std::vector<int64_t> cell_start(nc + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++cell_start[p.point_cell[i] + 1];
  for (int64_t c = 0; c < nc; ++c) cell_start[c + 1] += cell_start[c];
  p.order.resize(n);
  {
    std::vector<int64_t> fill(cell_start.begin(), cell_start.end() - 1);
    for (int64_t i = 0; i < n; ++i) p.order[fill[p.point_cell[i]]++] = i;
  }

  std::vector<PointKey> keys;
  p.token_start.reserve(n / token_size + nc + 1);
  p.token_start.push_back(0);
  p.cell_token_start.resize(nc + 1);
  p.cell_token_start[0] = 0;
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t b = cell_start[c];
    const int64_t e = cell_start[c + 1];
    if (e - b > 1) {
      keys.clear();
      for (int64_t k = b; k < e; ++k) {
        const int64_t i = p.order[k];
        keys.push_back({tokenize_spacetime ? points.times[i] : 0, theta[i], i});
      }
      // Keys are unique (the index breaks ties), so any sort is stable here.
      std::sort(keys.begin(), keys.end());
      for (int64_t k = b; k < e; ++k) p.order[k] = keys[k - b].index;
    }
    // Split each (cell[, time]) group into chunks of token_size points.
    int64_t g = b;
    while (g < e) {
      int64_t ge = e;
      if (tokenize_spacetime) {
        const int64_t t0 = points.times[p.order[g]];
        ge = g + 1;
        while (ge < e && points.times[p.order[ge]] == t0) ++ge;
      }
      for (int64_t k = g; k < ge; k += token_size) p.token_start.push_back(std::min(k + token_size, ge));
      g = ge;
    }
    p.cell_token_start[c + 1] = static_cast<int64_t>(p.token_start.size()) - 1;
  }
  return p;
}

void source_time_features(int64_t time, int64_t window_start, float out[kTimeFeatures]) {
  const int64_t days = time >= 0 ? time / 86400 : -((-time + 86399) / 86400);
  const int64_t year = year_of_days(days);
  const int64_t day_of_year = days - days_from_civil(year, 1, 1) + 1;
  const int64_t second_of_day = time - days * 86400;
  const int64_t minute_of_day = second_of_day / 60;  // 60·hour + minute; seconds ignored
  out[0] = static_cast<float>(year) / 2100.0f;
  out[1] = static_cast<float>(day_of_year) / 365.0f;
  out[2] = static_cast<float>(minute_of_day) / 1440.0f;
  const float a = half_day_phase(time, window_start);
  out[3] = std::sin(a);
  out[4] = std::cos(a);
}

void target_time_features(int64_t time, int64_t window_start, float out[kTimeFeatures]) {
  const float a = half_day_phase(time, window_start);
  const float s = std::sin(a);
  const float c = std::cos(a);
  out[0] = s + 0.5f;
  out[1] = c + 0.5f;
  out[2] = s + 0.5f;
  out[3] = c + 0.5f;
  out[4] = s + 0.5f;
}

void source_local_coords(const HealpixGrid& grid, float lat_deg, float lon_deg, int64_t cell, float out[2]) {
  const float theta = colatitude32(lat_deg);
  const float phi = azimuth32(lon_deg);
  const float st = std::sin(theta);
  const float pv[3] = {st * std::cos(phi), st * std::sin(phi), std::cos(theta)};
  const float* r = grid.rotation(kVertexC, cell);
  float q[3];
  for (int i = 0; i < 3; ++i) q[i] = r[3 * i] * pv[0] + r[3 * i + 1] * pv[1] + r[3 * i + 2] * pv[2];
  const float lat_local = std::atan2(q[2], std::sqrt(q[0] * q[0] + q[1] * q[1]));
  const float lon_local = std::atan2(q[1], q[0]);
  // §12.1: radians fed to a degrees normalisation, as upstream.
  out[0] = std::sin(lat_local * kDegToRad32);
  out[1] = std::sin(0.5f * lon_local * kDegToRad32);
}

std::vector<float> source_token_rows(const HealpixGrid& grid, const PointSet& points, const TokenPartition& partition,
                                     int64_t window_start, const std::vector<uint8_t>& keep, bool nan_to_zero) {
  std::vector<float> rows;
  append_source_token_rows(grid, points, partition, window_start, keep, nan_to_zero, rows);
  return rows;
}

void append_source_token_rows(const HealpixGrid& grid, const PointSet& points, const TokenPartition& partition,
                              int64_t window_start, const std::vector<uint8_t>& keep, bool nan_to_zero,
                              std::vector<float>& rows) {
  const int g = points.num_geoinfos;
  const int nch = points.num_channels;
  const int width = row_width(g, nch);
  const int ts = partition.token_size;
  const int64_t nt = partition.num_tokens();
  int64_t kept = nt;
  if (!keep.empty()) kept = std::count_if(keep.begin(), keep.end(), [](uint8_t k) { return k != 0; });
  // Appended rather than zero-filled then overwritten: the tensor is tens of
  // MB per sample and a second pass over it costs as much as building it.
  rows.reserve(rows.size() + static_cast<size_t>(kept) * ts * width);
  int64_t cached_time = 0;
  bool have_cache = false;
  float lead[kRowLeadColumns] = {0.0f};
  for (int64_t t = 0; t < nt; ++t) {
    if (!keep.empty() && !keep[t]) continue;
    for (int64_t k = partition.token_start[t]; k < partition.token_start[t + 1]; ++k) {
      const int64_t i = partition.order[k];
      if (k + kPrefetchAhead < static_cast<int64_t>(partition.order.size())) {
        prefetch_row(points.data.data() + partition.order[k + kPrefetchAhead] * nch, nch);
      }
      // anemoi windows share one time per slice: reuse its calendar features.
      if (!have_cache || points.times[i] != cached_time) {
        cached_time = points.times[i];
        have_cache = true;
        source_time_features(cached_time, window_start, lead + 1);
      }
      source_local_coords(grid, points.lat[i], points.lon[i], partition.point_cell[i], lead + 6);
      rows.insert(rows.end(), lead, lead + kRowLeadColumns);
      const size_t at = rows.size();
      rows.insert(rows.end(), points.geoinfos.begin() + i * g, points.geoinfos.begin() + (i + 1) * g);
      rows.insert(rows.end(), points.data.begin() + i * nch, points.data.begin() + (i + 1) * nch);
      if (nan_to_zero) zero_nan(rows.data() + at, g + nch);
    }
    rows.insert(rows.end(), (ts - partition.token_points(t)) * width, 0.0f);  // padding rows
  }
}

std::vector<float> target_point_rows(const PointSet& points, const std::vector<int64_t>& point_indices,
                                     int64_t window_start) {
  const int g = points.num_geoinfos;
  const int nch = points.num_channels;
  const int width = row_width(g, nch);
  std::vector<float> rows(point_indices.size() * width);
  float* out = rows.data();
  for (const int64_t i : point_indices) {
    out[0] = 0.0f;
    target_time_features(points.times[i], window_start, out + 1);
    out[6] = points.lat[i];
    out[7] = points.lon[i];
    std::copy_n(points.geoinfos.data() + i * g, g, out + kRowLeadColumns);
    std::copy_n(points.data.data() + i * nch, nch, out + kRowLeadColumns + g);
    out += width;
  }
  return rows;
}

std::vector<float> source_centroids(const HealpixGrid& grid, const std::vector<int64_t>& token_cells) {
  std::vector<float> out(token_cells.size() * kCentroidWidth);
  const std::vector<float>& ctr = grid.centres32();
  for (size_t t = 0; t < token_cells.size(); ++t) {
    const float x = ctr[token_cells[t] * 3];
    const float y = ctr[token_cells[t] * 3 + 1];
    const float z = ctr[token_cells[t] * 3 + 2];
    float* o = &out[t * kCentroidWidth];
    o[0] = x;
    o[1] = y;
    o[2] = z;
    o[3] = std::atan2(z, std::sqrt(x * x + y * y));
    o[4] = std::atan2(y, x);
  }
  return out;
}

PointSet spoof_points(const HealpixGrid& grid, const std::vector<double>& raw_channel_means, int num_geoinfos,
                      int64_t window_start) {
  const int64_t nc = grid.num_cells();
  const int nch = static_cast<int>(raw_channel_means.size());
  PointSet s;
  s.num_geoinfos = num_geoinfos;
  s.num_channels = nch;
  s.lat.resize(nc);
  s.lon.resize(nc);
  s.geoinfos.assign(nc * num_geoinfos, 0.0f);
  s.data.resize(nc * nch);
  s.times.assign(nc, window_start);
  const std::vector<double>& ll = grid.vertex_lonlat();
  for (int64_t c = 0; c < nc; ++c) {
    s.lon[c] = static_cast<float>(ll[(kVertexC * nc + c) * 2] * (180.0 / M_PI));
    s.lat[c] = static_cast<float>(ll[(kVertexC * nc + c) * 2 + 1] * (180.0 / M_PI));
    for (int j = 0; j < nch; ++j) s.data[c * nch + j] = static_cast<float>(raw_channel_means[j]);
  }
  return s;
}

}  // namespace wg
