// anemoi stream source (see header).
#include "wg/data/anemoi.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "wg/data/batch.h"
#include "wg/io/zarr.h"
#include "wg/util/dates.h"

namespace wg {

namespace fs = std::filesystem;

namespace {

constexpr double kPi = 3.14159265358979323846;

bool any_in(const std::vector<std::string>& needles, const std::string& name) {
  for (const auto& n : needles)
    if (name.find(n) != std::string::npos) return true;
  return false;
}

bool flagged(const nlohmann::json& meta, const std::string& name, const char* flag) {
  if (!meta.is_object() || !meta.contains(name) || !meta[name].is_object()) return false;
  const auto& m = meta[name];
  return m.contains(flag) && m[flag].is_boolean() && m[flag].get<bool>();
}

// "6h", "30m", "1d", or a number of hours (older stores) -> seconds.
int64_t frequency_seconds(const nlohmann::json& f, const std::string& store) {
  if (f.is_number_integer() && f.get<int64_t>() > 0) return f.get<int64_t>() * 3600;
  if (f.is_string()) {
    const std::string s = f.get<std::string>();
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const std::string unit = s.substr(used);
    const int64_t mult = unit == "h" ? 3600 : unit == "m" || unit == "min" ? 60 : unit == "d" ? 86400 : unit == "s" ? 1 : 0;
    if (used > 0 && v > 0 && mult > 0) return v * mult;
  }
  throw DataError(store + ": attribute 'frequency' must be like \"6h\" or a number of hours, got " + f.dump());
}

double wrap_lon(double lon) {
  double x = std::fmod(lon + 180.0, 360.0);
  if (x < 0) x += 360.0;
  return x - 180.0;
}

}  // namespace

TimeWindows TimeWindows::training(const Config& c) {
  return {c.start_date, c.end_date, int64_t(c.step_hrs) * 3600, int64_t(c.len_hrs) * 3600};
}

TimeWindows TimeWindows::validation(const Config& c) {
  return {c.start_date_val, c.end_date_val, int64_t(c.step_hrs) * 3600, int64_t(c.len_hrs) * 3600};
}

std::string anemoi_store_path(const StreamConfig& stream, const std::string& data_path) {
  const std::string where = "stream '" + stream.name + "' (" + stream.origin.str() + "): ";
  if (stream.filenames.size() != 1)
    throw DataError(where + "filenames must name exactly one anemoi Zarr store");
  const fs::path name = stream.filenames[0];
  if (name.is_absolute()) return name.lexically_normal().string();
  if (data_path.empty())
    throw DataError(where + "filenames entry '" + name.string() +
                    "' is relative, but no data root is set: set data_path, pass --data-path DIR or set "
                    "WG_DATA_PATH");
  return (fs::path(data_path) / name).lexically_normal().string();
}

struct AnemoiStream::State {
  std::string store, where;  // where: "stream 'ERA5' (store /x.zarr)"
  std::optional<zarr::Array> data;
  int64_t num_vars = 0, num_cells = 0;
  std::vector<int64_t> dates;
  std::set<int64_t> missing;
  int64_t period = 0;
  int64_t times_per_window = 0;  // dates per window: len_hrs / frequency

  std::vector<std::string> channels;
  std::vector<int64_t> var_index;  // store variable index per channel
  std::vector<uint8_t> is_source, is_target;
  std::vector<double> mean, stdev;  // per channel

  std::vector<int64_t> cells;  // kept cells, store order
  int token_size = 0, tokens_per_time = 0;
  std::vector<float> token_geo;  // [tokens_per_time, 3]: lat/90, sin lon, cos lon

  void open(const StreamConfig& s, const Config& config);
  void select_channels(const StreamConfig& s, const zarr::Group& g);
  void read_statistics(const zarr::Group& g);
  void read_dates(const zarr::Group& g);
  void read_coordinates(const zarr::Group& g);
  std::string date_text(int64_t t) const { return iso_date(t) + " (" + yyyymmddhhmm(t) + ")"; }
  // Index of time t in `dates`, or -1 when outside the store.
  int64_t index_of(int64_t t) const {
    if (t < dates.front() || t > dates.back() || (t - dates.front()) % period != 0) return -1;
    return (t - dates.front()) / period;
  }
};

void AnemoiStream::State::open(const StreamConfig& s, const Config& config) {
  token_size = s.token_size;
  store = anemoi_store_path(s, config.data_path);
  where = "stream '" + s.name + "' (store " + store + ")";
  const zarr::Group g = zarr::Group::open(store);  // ZarrError: the constructor names the stream
  for (const char* a : {"data", "dates", "latitudes", "longitudes", "mean", "stdev"})
    if (!g.has_array(a)) throw DataError(where + ": the store has no array '" + a + "' (not an anemoi dataset?)");
  data = g.array("data", 2);
  const auto& m = data->meta();
  if (m.shape.size() != 4 || (m.dtype != zarr::DType::F4 && m.dtype != zarr::DType::F8))
    throw DataError(where + ": array 'data' must be 4-D [dates, variables, ensembles, cells] of <f4 or <f8, got " +
                    std::to_string(m.shape.size()) + "-D " + m.dtype_str);
  if (m.shape[2] < 1) throw DataError(where + ": array 'data' has no ensemble member (shape[2] is 0)");
  num_vars = m.shape[1];
  num_cells = m.shape[3];
  select_channels(s, g);
  read_statistics(g);
  read_dates(g);
  read_coordinates(g);

  const TimeWindows windows = TimeWindows::training(config);
  if (windows.length % period != 0 || windows.step % period != 0)
    throw DataError(where + ": len_hrs (" + std::to_string(config.len_hrs) + ") and step_hrs (" +
                    std::to_string(config.step_hrs) + ") must be multiples of the store's frequency (" +
                    std::to_string(period / 3600.0).substr(0, 4) + " h)");
  times_per_window = windows.length / period;
}

void AnemoiStream::State::select_channels(const StreamConfig& s, const zarr::Group& g) {
  const auto& attrs = g.attrs();
  if (!attrs.contains("variables") || !attrs["variables"].is_array())
    throw DataError(where + ": root attribute 'variables' (the channel names) is missing");
  std::vector<std::string> vars;
  for (const auto& v : attrs["variables"]) vars.push_back(v.is_string() ? v.get<std::string>() : v.dump());
  if (int64_t(vars.size()) != num_vars)
    throw DataError(where + ": attribute 'variables' names " + std::to_string(vars.size()) +
                    " variables but array 'data' has " + std::to_string(num_vars));
  const nlohmann::json meta = attrs.contains("variables_metadata") ? attrs["variables_metadata"] : nlohmann::json();
  for (const auto* rule : {&s.source, &s.target})
    for (const auto& entry : *rule)
      if (std::none_of(vars.begin(), vars.end(), [&](const std::string& v) { return v.find(entry) != std::string::npos; }))
        throw DataError(where + ": " + (rule == &s.source ? "source" : "target") + " entry '" + entry +
                        "' matches no variable of the store");
  for (size_t i = 0; i < vars.size(); ++i) {
    const std::string& v = vars[i];
    if (flagged(meta, v, "computed_forcing") || flagged(meta, v, "constant_in_time")) continue;
    const bool src = (s.source.empty() || any_in(s.source, v)) && !any_in(s.source_exclude, v);
    const bool tgt = (s.target.empty() || any_in(s.target, v)) && !any_in(s.target_exclude, v);
    if (!src && !tgt) continue;
    channels.push_back(v);
    var_index.push_back(int64_t(i));
    is_source.push_back(src);
    is_target.push_back(tgt);
  }
  if (std::find(is_source.begin(), is_source.end(), 1) == is_source.end() ||
      std::find(is_target.begin(), is_target.end(), 1) == is_target.end())
    throw DataError(where + ": the channel rules leave no " +
                    (std::find(is_source.begin(), is_source.end(), 1) == is_source.end() ? "source" : "target") +
                    " channel (check source, source_exclude, target, target_exclude)");
}

void AnemoiStream::State::read_statistics(const zarr::Group& g) {
  const std::vector<double> all_mean = g.array("mean").read_all_f64(), all_stdev = g.array("stdev").read_all_f64();
  if (int64_t(all_mean.size()) != num_vars || int64_t(all_stdev.size()) != num_vars)
    throw DataError(where + ": arrays 'mean' and 'stdev' must have one value per variable (" +
                    std::to_string(num_vars) + ")");
  for (size_t c = 0; c < channels.size(); ++c) {
    const double mu = all_mean[size_t(var_index[c])], sd = all_stdev[size_t(var_index[c])];
    if (!std::isfinite(mu) || !std::isfinite(sd) || sd <= 0)
      throw DataError(where + ": variable '" + channels[c] + "' has mean " + std::to_string(mu) + " and stdev " +
                      std::to_string(sd) + ", which cannot normalise it; exclude it with source_exclude and "
                      "target_exclude");
    mean.push_back(mu);
    stdev.push_back(sd);
  }
}

void AnemoiStream::State::read_dates(const zarr::Group& g) {
  dates = g.array("dates").read_all_i64();
  if (int64_t(dates.size()) != data->meta().shape[0] || dates.empty())
    throw DataError(where + ": array 'dates' has " + std::to_string(dates.size()) + " entries but 'data' has " +
                    std::to_string(data->meta().shape[0]) + " dates");
  const auto& attrs = g.attrs();
  period = attrs.contains("frequency") ? frequency_seconds(attrs["frequency"], where)
           : dates.size() > 1          ? dates[1] - dates[0]
                                       : 3600;
  constexpr int64_t kNaT = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < dates.size(); ++i)
    if (dates[i] == kNaT) throw DataError(where + ": array 'dates' holds NaT at index " + std::to_string(i));
  if (period <= 0)
    throw DataError(where + ": dates do not increase (" + date_text(dates[0]) + " then " + date_text(dates[1]) +
                    ") and there is no 'frequency' attribute");
  for (size_t i = 1; i < dates.size(); ++i)
    if (dates[i] - dates[i - 1] != period)
      throw DataError(where + ": dates are not evenly spaced by the frequency: " + date_text(dates[i - 1]) +
                      " is followed by " + date_text(dates[i]));
  if (attrs.contains("missing_dates") && attrs["missing_dates"].is_array())
    for (const auto& d : attrs["missing_dates"]) {
      const auto t = d.is_string() ? parse_iso_date(d.get<std::string>()) : std::nullopt;
      if (!t) throw DataError(where + ": attribute missing_dates holds " + d.dump() + ", not an ISO date");
      missing.insert(*t);
    }
}

void AnemoiStream::State::read_coordinates(const zarr::Group& g) {
  const std::vector<double> lat = g.array("latitudes").read_all_f64(), lon = g.array("longitudes").read_all_f64();
  if (int64_t(lat.size()) != num_cells || int64_t(lon.size()) != num_cells)
    throw DataError(where + ": 'latitudes' and 'longitudes' must have one value per cell (" +
                    std::to_string(num_cells) + ")");
  std::vector<double> la, lo;
  for (int64_t i = 0; i < num_cells; ++i) {
    double y = lat[size_t(i)], x = lon[size_t(i)];
    if (!std::isfinite(y) || !std::isfinite(x)) continue;
    y = std::fmod(y + 90.0, 360.0);  // reflect into [-90, 90], crossing a pole flips the longitude
    if (y < 0) y += 360.0;
    if (y > 180.0) {
      y = 360.0 - y;
      x += 180.0;
    }
    cells.push_back(i);
    la.push_back(y - 90.0);
    lo.push_back(wrap_lon(x));
  }
  if (cells.empty()) throw DataError(where + ": every cell has NaN coordinates");
  // A token's position: mean latitude and the direction of its mean longitude vector.
  tokens_per_time = int((int64_t(cells.size()) + token_size - 1) / token_size);
  for (int t = 0; t < tokens_per_time; ++t) {
    double y = 0, sx = 0, cx = 0;
    const size_t a = size_t(t) * size_t(token_size), b = std::min(cells.size(), a + size_t(token_size));
    for (size_t j = a; j < b; ++j) {
      y += la[j];
      sx += std::sin(lo[j] * kPi / 180.0);
      cx += std::cos(lo[j] * kPi / 180.0);
    }
    const double n = double(b - a), r = std::hypot(sx, cx);
    token_geo.push_back(float(y / n / 90.0));
    token_geo.push_back(float(r > 0 ? sx / r : 0.0));
    token_geo.push_back(float(r > 0 ? cx / r : 1.0));
  }
}

AnemoiStream::AnemoiStream(const StreamConfig& stream, const Config& config) : s_(std::make_unique<State>()) {
  try {
    s_->open(stream, config);
  } catch (const zarr::ZarrError& e) {  // an array of the store that cannot be read
    throw DataError("stream '" + stream.name + "' (" + stream.origin.str() + "): " + e.what());
  }
}

AnemoiStream::~AnemoiStream() = default;
AnemoiStream::AnemoiStream(AnemoiStream&&) noexcept = default;

const std::string& AnemoiStream::store() const { return s_->store; }
const std::vector<std::string>& AnemoiStream::channels() const { return s_->channels; }
const std::vector<uint8_t>& AnemoiStream::is_source() const { return s_->is_source; }
int AnemoiStream::tokens() const { return int(s_->times_per_window) * s_->tokens_per_time; }
int AnemoiStream::token_size() const { return s_->token_size; }

bool AnemoiStream::has_window(int64_t t0) const {
  for (int64_t j = 0; j < s_->times_per_window; ++j) {
    const int64_t t = t0 + j * s_->period;
    if (s_->index_of(t) < 0 || s_->missing.count(t)) return false;
  }
  return true;
}

void AnemoiStream::check_period(const TimeWindows& w, const std::string& what) const {
  const State& s = *s_;
  if (w.count() <= 0) return;
  const int64_t last = w.start + (w.count() - 1) * w.step + w.length - s.period;  // the last window's last date
  if (w.start < s.dates.front())
    throw DataError(s.where + ": the " + what + " starts at " + s.date_text(w.start) +
                    ", before the store's first date " + s.date_text(s.dates.front()));
  if (last > s.dates.back())
    throw DataError(s.where + ": the " + what + " needs data up to " + s.date_text(last) +
                    ", after the store's last date " + s.date_text(s.dates.back()));
  if ((w.start - s.dates.front()) % s.period != 0)
    throw DataError(s.where + ": the " + what + " starts at " + s.date_text(w.start) +
                    ", which is not one of the store's dates (every " + std::to_string(s.period / 60) + " min from " +
                    s.date_text(s.dates.front()) + ")");
}

void AnemoiStream::sample(int64_t t0, std::vector<float>& values, std::vector<uint8_t>& valid,
                          std::vector<float>& centroids) const {
  const State& s = *s_;
  const int64_t C = int64_t(s.channels.size()), ts = s.token_size, T = s.tokens_per_time;
  const size_t v0 = values.size(), k0 = valid.size(), c0 = centroids.size();
  values.resize(v0 + size_t(s.times_per_window * T * ts * C), 0.0f);
  valid.resize(k0 + size_t(s.times_per_window * T * ts * C), 0);
  // One date of the store (16 MB for ERA5 o96): reused per thread, so
  // samples do not page-fault fresh memory every time.
  thread_local std::vector<float> raw;
  raw.resize(size_t(s.num_vars * s.num_cells));
  try {
    for (int64_t j = 0; j < s.times_per_window; ++j) {
      const int64_t t = t0 + j * s.period, idx = s.index_of(t);
      if (idx < 0) throw DataError(s.where + ": no data for " + s.date_text(t));
      const auto& m = s.data->meta();
      // One date of every variable and cell, ensemble member 0.
      if (m.dtype == zarr::DType::F4) {
        s.data->read({idx, 0, 0, 0}, {1, s.num_vars, 1, s.num_cells}, raw.data());
      } else {
        thread_local std::vector<double> raw64;
        raw64.resize(raw.size());
        s.data->read({idx, 0, 0, 0}, {1, s.num_vars, 1, s.num_cells}, raw64.data());
        std::copy(raw64.begin(), raw64.end(), raw.begin());
      }
      float* out = values.data() + v0 + size_t(j * T * ts * C);
      uint8_t* ok = valid.data() + k0 + size_t(j * T * ts * C);
      for (int64_t c = 0; c < C; ++c) {
        const float* src = raw.data() + s.var_index[size_t(c)] * s.num_cells;
        const double mu = s.mean[size_t(c)], sd = s.stdev[size_t(c)];
        const uint8_t target = s.is_target[size_t(c)];
        for (size_t p = 0; p < s.cells.size(); ++p) {  // point p: token p / ts, slot p % ts
          const float x = src[s.cells[p]];
          const bool finite = std::isfinite(x);
          out[p * size_t(C) + size_t(c)] = finite ? float((double(x) - mu) / sd) : 0.0f;
          ok[p * size_t(C) + size_t(c)] = finite && target;
        }
      }
      const int64_t sec = ((t % 86400) + 86400) % 86400;
      const double tod = 2 * kPi * double(sec) / 86400.0;
      for (int64_t i = 0; i < T; ++i) {
        centroids.insert(centroids.end(), s.token_geo.begin() + i * 3, s.token_geo.begin() + i * 3 + 3);
        centroids.push_back(float(std::sin(tod)));
        centroids.push_back(float(std::cos(tod)));
      }
    }
  } catch (const zarr::ZarrError& e) {
    values.resize(v0);
    valid.resize(k0);
    centroids.resize(c0);
    throw DataError(s.where + ", window starting " + s.date_text(t0) + ": " + e.what());
  } catch (...) {
    values.resize(v0);
    valid.resize(k0);
    centroids.resize(c0);
    throw;
  }
}

}  // namespace wg
