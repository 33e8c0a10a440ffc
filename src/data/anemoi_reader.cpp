// anemoi stores as PointSets (see header). Sections: opening (arrays,
// attributes, channels, statistics, dates, coordinates) and reading one
// window (raw dates → normalised, time-major points).
#include "wg/data/anemoi_reader.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "wg/data/object_pool.h"
#include "wg/io/zarr.h"
#include "wg/util/dates.h"

namespace wg {

namespace {

// Python's float `%` with a positive divisor: the result has the divisor's
// sign (numpy's npy_divmod), +0 for an exact multiple.
double py_mod(double x, double m) {
  double r = std::fmod(x, m);
  if (r != 0.0) {
    if ((r < 0.0) != (m < 0.0)) r += m;
  } else {
    r = std::copysign(0.0, m);
  }
  return r;
}

bool flagged(const nlohmann::json& meta, const std::string& name, const char* flag) {
  if (!meta.is_object() || !meta.contains(name) || !meta[name].is_object()) return false;
  const auto& m = meta[name];
  return m.contains(flag) && m[flag].is_boolean() && m[flag].get<bool>();
}

// Channels [dst, dst + len) of one PointSet copied from columns [src, src + len) of another.
struct CopyRun {
  size_t dst, src, len;
};

}  // namespace

struct AnemoiReader::State {
  std::optional<zarr::Array> data;
  int64_t num_vars = 0, num_grid = 0;
  std::vector<int64_t> dates;             // [n_dates] of the whole store, seconds
  std::set<int64_t> missing;              // missing_dates
  int64_t first = 0;                      // store index of data_start
  int64_t stride = 1;                     // k: every k-th store date (frequency key)
  int64_t count = 0;                      // dates of the period's data
  int64_t period = 0;                     // stride · store period
  std::vector<int64_t> src_idx, tgt_idx;  // store variable index per channel
  std::vector<int64_t> kept;              // [n_kept] grid indices without a NaN coordinate
  std::vector<float> lat, lon;            // [n_kept] transformed (§3.1.4 step 4)
  // Source channels that are also target channels: runs copied from the
  // target's rows (same variable, same statistics: the same floats); the
  // others are normalised. See fill_channels.
  std::vector<CopyRun> src_runs;
  std::vector<int64_t> src_computed, tgt_computed;  // channel positions normalised from raw
  std::vector<int64_t> src_all;                     // 0 … n_src − 1 (source read without target)
  mutable ObjectPool<std::vector<float>> raw_pool;  // read buffers [T, n_vars, n_grid], one per reading thread

  int64_t data_start() const { return dates[size_t(first)]; }
  int64_t data_end() const { return dates[size_t(first + (count - 1) * stride)]; }
};

// ---- opening -------------------------------------------------------------------

namespace {

int64_t frequency_seconds(const nlohmann::json& f) {
  if (f.is_number_integer() && f.get<int64_t>() > 0) return f.get<int64_t>() * 3600;
  if (!f.is_string()) return 0;
  const std::string s = f.get<std::string>();
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const std::string unit = s.substr(used);
  const int64_t mult = unit == "h"                    ? 3600
                       : unit == "m" || unit == "min" ? 60
                       : unit == "d"                  ? 86400
                       : unit == "s"                  ? 1
                                                      : 0;
  return v > 0 ? v * mult : 0;
}

std::string date_text(int64_t t) { return iso_date(t); }

}  // namespace

AnemoiReader::AnemoiReader(const std::string& stream, const std::string& path, const ChannelRules& rules,
                           const TimeWindowHandler& windows, int64_t frequency)
    : StreamReader(stream, path), s_(std::make_unique<State>()) {
  State& s = *s_;
  auto fail = [&](const std::string& key, const std::string& msg) { throw ReaderError(stream, path, key, msg); };
  std::optional<zarr::Group> group;
  try {
    group = zarr::Group::open(path);
  } catch (const zarr::ZarrError& e) {
    fail("(store)", std::string("cannot open the anemoi store: ") + e.what());
  }
  const zarr::Group& g = *group;
  const nlohmann::json& attrs = g.attrs();
  try {
    // Arrays.
    for (const char* a : {"data", "dates", "mean", "stdev"}) {
      if (!g.has_array(a)) fail(a, "the store has no array '" + std::string(a) + "' (not an anemoi dataset?)");
    }
    const char* lat_key = g.has_array("latitudes") ? "latitudes" : "latitude";
    const char* lon_key = g.has_array("longitudes") ? "longitudes" : "longitude";
    if (!g.has_array(lat_key) || !g.has_array(lon_key))
      fail("latitudes", "the store has neither 'latitudes'/'longitudes' nor 'latitude'/'longitude' arrays");
    s.data = g.array("data", 2);
    const zarr::ArrayMeta& m = s.data->meta();
    if (m.shape.size() != 4 || (m.dtype != zarr::DType::F4 && m.dtype != zarr::DType::F8))
      fail("data", "must be 4-D [dates, variables, ensembles, cells] of <f4 or <f8, got " +
                       std::to_string(m.shape.size()) + "-D " + m.dtype_str);
    if (m.shape[2] < 1) fail("data", "has no ensemble member (shape[2] is 0)");
    s.num_vars = m.shape[1];
    s.num_grid = m.shape[3];

    // Variable names: `variables`, else `name_to_index`.
    std::vector<std::string> names(size_t(s.num_vars));
    if (attrs.contains("variables") && attrs["variables"].is_array()) {
      if (int64_t(attrs["variables"].size()) != s.num_vars)
        fail("variables", "names " + std::to_string(attrs["variables"].size()) + " variables but 'data' has " +
                              std::to_string(s.num_vars));
      for (size_t i = 0; i < names.size(); ++i) names[i] = attrs["variables"][i].get<std::string>();
    } else if (attrs.contains("name_to_index") && attrs["name_to_index"].is_object()) {
      for (const auto& [name, idx] : attrs["name_to_index"].items()) {
        const int64_t i = idx.get<int64_t>();
        if (i < 0 || i >= s.num_vars) fail("name_to_index", "maps '" + name + "' to " + std::to_string(i));
        names[size_t(i)] = name;
      }
    } else {
      fail("variables", "the root attributes have neither 'variables' nor 'name_to_index'");
    }

    // Channel selection (§3.1.3).
    const nlohmann::json meta = attrs.contains("variables_metadata") ? attrs["variables_metadata"] : nlohmann::json();
    std::set<std::string> constant;
    if (attrs.contains("constant_fields") && attrs["constant_fields"].is_array())
      for (const auto& c : attrs["constant_fields"]) constant.insert(c.get<std::string>());
    std::vector<std::string> selectable;
    std::vector<int64_t> selectable_idx;
    for (int64_t i = 0; i < s.num_vars; ++i) {
      const std::string& v = names[size_t(i)];
      if (meta.is_object() && !meta.contains(v)) continue;
      if (flagged(meta, v, "computed_forcing") || flagged(meta, v, "constant_in_time") || constant.count(v)) continue;
      selectable.push_back(v);
      selectable_idx.push_back(i);
    }
    check_includes_match(stream, path, "source", rules.source, selectable);
    check_includes_match(stream, path, "target", rules.target, selectable);
    for (size_t j = 0; j < selectable.size(); ++j) {
      if (channel_selected(selectable[j], rules.source, rules.source_exclude)) {
        channels_.source.push_back(selectable[j]);
        s.src_idx.push_back(selectable_idx[j]);
      }
      if (channel_selected(selectable[j], rules.target, rules.target_exclude)) {
        channels_.target.push_back(selectable[j]);
        s.tgt_idx.push_back(selectable_idx[j]);
      }
    }
    if (channels_.source.empty()) fail("source", "the rules (source, source_exclude) leave no channel");
    if (channels_.target.empty()) fail("target", "the rules (target, target_exclude) leave no channel");
    for (size_t c = 0; c < s.tgt_idx.size(); ++c) s.tgt_computed.push_back(int64_t(c));
    for (size_t c = 0; c < s.src_idx.size(); ++c) s.src_all.push_back(int64_t(c));
    for (size_t c = 0; c < s.src_idx.size(); ++c) {
      const auto it = std::find(s.tgt_idx.begin(), s.tgt_idx.end(), s.src_idx[c]);
      if (it == s.tgt_idx.end()) {
        s.src_computed.push_back(int64_t(c));
        continue;
      }
      const size_t j = size_t(it - s.tgt_idx.begin());
      if (!s.src_runs.empty() && s.src_runs.back().dst + s.src_runs.back().len == c &&
          s.src_runs.back().src + s.src_runs.back().len == j)
        ++s.src_runs.back().len;
      else
        s.src_runs.push_back({c, j, 1});
    }

    // Statistics.
    const std::vector<double> mean = g.array("mean").read_all_f64(), stdev = g.array("stdev").read_all_f64();
    if (int64_t(mean.size()) != s.num_vars || int64_t(stdev.size()) != s.num_vars)
      fail("mean", "'mean' and 'stdev' must have one value per variable (" + std::to_string(s.num_vars) + ")");
    for (size_t c = 0; c < s.src_idx.size(); ++c) {
      const size_t i = size_t(s.src_idx[c]);
      check_statistics(stream, path, "stdev", names[i], mean[i], stdev[i]);
      channels_.source_mean.push_back(mean[i]);
      channels_.source_stdev.push_back(stdev[i]);
    }
    for (size_t c = 0; c < s.tgt_idx.size(); ++c) {
      const size_t i = size_t(s.tgt_idx[c]);
      check_statistics(stream, path, "stdev", names[i], mean[i], stdev[i]);
      channels_.target_mean.push_back(mean[i]);
      channels_.target_stdev.push_back(stdev[i]);
    }

    // Dates and the period's cut (§3.1.2).
    s.dates = g.array("dates").read_all_i64();
    if (int64_t(s.dates.size()) != m.shape[0] || s.dates.empty())
      fail("dates", "has " + std::to_string(s.dates.size()) + " entries but 'data' has " + std::to_string(m.shape[0]) +
                        " dates");
    const int64_t store_period = attrs.contains("frequency") ? frequency_seconds(attrs["frequency"])
                                 : s.dates.size() > 1        ? s.dates[1] - s.dates[0]
                                                             : 3600;
    if (store_period <= 0)
      fail("frequency", "must be like \"6h\" or a number of hours, got " +
                            (attrs.contains("frequency") ? attrs["frequency"].dump() : "none"));
    for (size_t i = 1; i < s.dates.size(); ++i) {
      if (s.dates[i] - s.dates[i - 1] != store_period)
        fail("dates", "are not evenly spaced by the frequency: " + date_text(s.dates[i - 1]) + " is followed by " +
                          date_text(s.dates[i]));
    }
    if (attrs.contains("missing_dates") && attrs["missing_dates"].is_array()) {
      for (const auto& d : attrs["missing_dates"]) {
        const auto t = d.is_string() ? parse_iso_date(d.get<std::string>()) : std::nullopt;
        if (!t) fail("missing_dates", "holds " + d.dump() + ", not an ISO date");
        s.missing.insert(*t);
      }
    }
    if (windows.t_start() >= s.dates.back() || windows.t_end() <= s.dates.front())
      fail("dates", "the period " + date_text(windows.t_start()) + " … " + date_text(windows.t_end()) +
                        " lies outside the store's dates " + date_text(s.dates.front()) + " … " +
                        date_text(s.dates.back()));
    if (frequency > 0) {
      if (frequency % store_period != 0)
        fail("frequency", "the stream's frequency (" + std::to_string(frequency) +
                              " s) is no multiple of the store's (" + std::to_string(store_period) + " s)");
      s.stride = frequency / store_period;
    }
    const int64_t first = std::lower_bound(s.dates.begin(), s.dates.end(), windows.t_start()) - s.dates.begin();
    const int64_t last = (std::upper_bound(s.dates.begin(), s.dates.end(), windows.t_end()) - s.dates.begin()) - 1;
    if (last < first) fail("dates", "no store date lies in the period");
    s.first = first;
    s.count = (last - first) / s.stride + 1;
    s.period = store_period * s.stride;

    // Coordinates (§3.1.4 step 4), NaN coordinates dropped (§3.3 step 2).
    const std::vector<double> la = g.array(lat_key).read_all_f64(), lo = g.array(lon_key).read_all_f64();
    if (int64_t(la.size()) != s.num_grid || int64_t(lo.size()) != s.num_grid)
      fail(lat_key, "'" + std::string(lat_key) + "' and '" + lon_key + "' must have one value per cell (" +
                        std::to_string(s.num_grid) + ")");
    for (int64_t i = 0; i < s.num_grid; ++i) {
      const double y = la[size_t(i)], x = lo[size_t(i)];
      const float lat32 = static_cast<float>(2.0 * std::min(90.0, std::max(-90.0, y)) - y);
      const float lon32 = static_cast<float>(py_mod(x + 180.0, 360.0) - 180.0);
      if (std::isnan(y) || std::isnan(lat32) || std::isnan(lon32)) continue;
      s.kept.push_back(i);
      s.lat.push_back(lat32);
      s.lon.push_back(lon32);
    }
  } catch (const zarr::ZarrError& e) {
    fail("(metadata)", e.what());
  } catch (const nlohmann::json::exception& e) {
    fail("(attributes)", std::string("unexpected attribute type: ") + e.what());
  }
}

AnemoiReader::~AnemoiReader() = default;

int64_t AnemoiReader::data_start() const { return s_->data_start(); }
int64_t AnemoiReader::data_end() const { return s_->data_end(); }
int64_t AnemoiReader::store_first_date() const { return s_->dates.front(); }
int64_t AnemoiReader::store_last_date() const { return s_->dates.back(); }
int64_t AnemoiReader::period() const { return s_->period; }
int64_t AnemoiReader::num_grid_points() const { return s_->num_grid; }
const std::vector<int64_t>& AnemoiReader::source_index() const { return s_->src_idx; }
const std::vector<int64_t>& AnemoiReader::target_index() const { return s_->tgt_idx; }

std::vector<int64_t> AnemoiReader::window_dates(const TimeWindow& window) const {
  std::vector<int64_t> out;
  for (int64_t d : dataset_indexes(window, s_->data_start(), s_->data_end(), s_->period))
    out.push_back(s_->dates[size_t(s_->first + d * s_->stride)]);
  return out;
}

// ---- reading a window ------------------------------------------------------------

namespace {

// Channels `idx` of raw [T, n_vars, n_grid] at the kept cells into
// out.data [T·n_kept, n_ch], normalised (§3.3 step 3): the channels listed
// in `computed` from raw, the `runs` copied from the same rows of `from`
// (the same points' other channel set).
void fill_channels(const float* raw, int64_t num_times, int64_t num_vars, int64_t num_grid,
                   const std::vector<int64_t>& kept, const std::vector<int64_t>& idx, const std::vector<double>& mean,
                   const std::vector<double>& stdev, const std::vector<int64_t>& computed, const PointSet* from,
                   const std::vector<CopyRun>& runs, PointSet& out) {
  const size_t nk = kept.size(), nc = idx.size(), ncomp = computed.size();
  const size_t nf = from ? size_t(from->num_channels) : 0;
  const bool all_kept = int64_t(nk) == num_grid;  // no NaN coordinate: kept[p] == p
  out.data.resize(size_t(num_times) * nk * nc);   // no-op for a reused PointSet of this size
  // Blocks of kBlock points: each computed channel is normalised into a
  // channel-major scratch block (contiguous loads and stores, vectorised),
  // then the block is transposed into the point-major rows; it stays in L1.
  constexpr size_t kBlock = 64;
  std::vector<float> block(kBlock * ncomp);  // [ncomp, kBlock]
  for (int64_t t = 0; t < num_times; ++t) {
    float* dst = out.data.data() + size_t(t) * nk * nc;
    const float* other = from ? from->data.data() + size_t(t) * nk * nf : nullptr;
    for (size_t p0 = 0; p0 < nk; p0 += kBlock) {
      const size_t m = std::min(kBlock, nk - p0);
      for (size_t k = 0; k < ncomp; ++k) {
        const size_t c = size_t(computed[k]);
        float* b = block.data() + k * kBlock;
        const float* src = raw + (size_t(t) * size_t(num_vars) + size_t(idx[c])) * size_t(num_grid);
        const double mu = mean[c], sd = stdev[c];
        if (all_kept) {
          for (size_t p = 0; p < m; ++p) b[p] = normalise_value(src[p0 + p], mu, sd);
        } else {
          for (size_t p = 0; p < m; ++p) b[p] = normalise_value(src[kept[p0 + p]], mu, sd);
        }
      }
      if (from) {
        for (size_t p = 0; p < m; ++p) {
          float* row = dst + (p0 + p) * nc;
          const float* orow = other + (p0 + p) * nf;
          for (const CopyRun& r : runs) std::copy(orow + r.src, orow + r.src + r.len, row + r.dst);
        }
      }
      // Transpose four points at a time: one 16-byte read of the block per channel.
      size_t p = 0;
      for (; p + 4 <= m; p += 4) {
        float* r0 = dst + (p0 + p) * nc;
        float *r1 = r0 + nc, *r2 = r1 + nc, *r3 = r2 + nc;
        for (size_t k = 0; k < ncomp; ++k) {
          const float* b = block.data() + k * kBlock + p;
          const size_t c = size_t(computed[k]);
          r0[c] = b[0];
          r1[c] = b[1];
          r2[c] = b[2];
          r3[c] = b[3];
        }
      }
      for (; p < m; ++p) {
        float* row = dst + (p0 + p) * nc;
        for (size_t k = 0; k < ncomp; ++k) row[computed[k]] = block[k * kBlock + p];
      }
    }
  }
}

void fill_coords(const std::vector<float>& lat, const std::vector<float>& lon, const std::vector<int64_t>& times,
                 PointSet& out) {
  const size_t nk = lat.size();
  for (int64_t t : times) {
    out.lat.insert(out.lat.end(), lat.begin(), lat.end());
    out.lon.insert(out.lon.end(), lon.begin(), lon.end());
    out.times.insert(out.times.end(), nk, t);
  }
}

}  // namespace

void AnemoiReader::read(const TimeWindow& window, PointSet* source, PointSet* target) const {
  const State& s = *s_;
  if (source) reset_points(*source, true, false);
  if (target) reset_points(*target, false, false);
  const std::vector<int64_t> idx = dataset_indexes(window, s.data_start(), s.data_end(), s.period);
  if (idx.empty()) {
    if (source) source->data.clear();
    if (target) target->data.clear();
    return;
  }
  if (!source && !target) return;
  std::vector<int64_t> times;
  for (int64_t d : idx) {
    const int64_t t = s.dates[size_t(s.first + d * s.stride)];
    if (s.missing.count(t))
      throw UnreadableWindow(stream_, file_, "missing_dates",
                             "the window " + iso_date(window.start) + " … " + iso_date(window.end) + " needs date " +
                                 iso_date(t) + ", which the store lists as missing");
    times.push_back(t);
  }
  // [T, n_vars, n_grid] raw values of ensemble member 0, in a pooled buffer.
  const int64_t nt = int64_t(times.size());
  const size_t per_date = size_t(s.num_vars) * size_t(s.num_grid);
  const auto raw = s.raw_pool.acquire();
  if (raw->size() < size_t(nt) * per_date) raw->resize(size_t(nt) * per_date);
  try {
    std::vector<double> raw64;
    for (int64_t j = 0; j < nt; ++j) {
      const int64_t si = s.first + idx[size_t(j)] * s.stride;
      if (s.data->meta().dtype == zarr::DType::F4) {
        s.data->read({si, 0, 0, 0}, {1, s.num_vars, 1, s.num_grid}, raw->data() + size_t(j) * per_date);
      } else {
        raw64.resize(per_date);
        s.data->read({si, 0, 0, 0}, {1, s.num_vars, 1, s.num_grid}, raw64.data());
        std::transform(raw64.begin(), raw64.end(), raw->begin() + ptrdiff_t(size_t(j) * per_date),
                       [](double v) { return static_cast<float>(v); });
      }
    }
  } catch (const zarr::ZarrError& e) {
    throw UnreadableWindow(
        stream_, file_, "data",
        "cannot read the window " + iso_date(window.start) + " … " + iso_date(window.end) + ": " + e.what());
  }
  if (target) {
    fill_coords(s.lat, s.lon, times, *target);
    fill_channels(raw->data(), nt, s.num_vars, s.num_grid, s.kept, s.tgt_idx, channels_.target_mean,
                  channels_.target_stdev, s.tgt_computed, nullptr, {}, *target);
  }
  if (source) {
    fill_coords(s.lat, s.lon, times, *source);
    // Without a target read, every source channel is normalised from raw.
    fill_channels(raw->data(), nt, s.num_vars, s.num_grid, s.kept, s.src_idx, channels_.source_mean,
                  channels_.source_stdev, target ? s.src_computed : s.src_all, target, s.src_runs, *source);
  }
}

}  // namespace wg
