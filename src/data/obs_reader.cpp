// obs stores as PointSets (see header). Sections: opening (columns,
// channels, statistics, the hourly index), locating a window's rows, and
// reading them.
#include "wg/data/obs_reader.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "wg/io/zarr.h"
#include "wg/util/dates.h"

namespace wg {

struct ObsReader::State {
  std::optional<zarr::Array> data, dates, index;
  int64_t num_rows = 0, num_cols = 0, date_cols = 1;
  std::vector<std::string> colnames;
  std::string index_name;
  std::vector<int64_t> hourly;  // the hourly index
  int64_t base = 0;             // base_datetime, seconds
  int64_t lat_col = -1, lon_col = -1;
  std::vector<int64_t> src_cols, tgt_cols, geo_cols;

  std::pair<int64_t, int64_t> row_range(const TimeWindow& window) const;
  // The rows with a date inside `window` (ascending) and their dates.
  void locate(const TimeWindow& window, const std::string& stream, const std::string& file, std::vector<int64_t>& rows,
              std::vector<int64_t>& times) const;
};

// ---- opening -------------------------------------------------------------------

namespace {

nlohmann::json read_json_file(const std::string& file) {
  std::ifstream f(file);
  if (!f) return nlohmann::json();
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(zarr::python_nonfinite_as_null(ss.str()));  // a column's NaN statistics: null
}

std::vector<double> number_list(const nlohmann::json& attrs, const char* key, size_t n,
                                const std::function<void(const std::string&, const std::string&)>& fail) {
  const std::string where = std::string("data/.zattrs ") + key;
  if (!attrs.contains(key) || !attrs[key].is_array()) fail(where, "is missing (per-column statistics)");
  if (attrs[key].size() != n)
    fail(where, "has " + std::to_string(attrs[key].size()) + " values for " + std::to_string(n) + " columns");
  std::vector<double> out;
  for (const auto& v : attrs[key]) out.push_back(v.is_number() ? v.get<double>() : std::nan(""));
  return out;
}

}  // namespace

ObsReader::ObsReader(const std::string& stream, const std::string& path, const ChannelRules& rules,
                     int64_t base_datetime)
    : StreamReader(stream, path), s_(std::make_unique<State>()) {
  State& s = *s_;
  s.base = base_datetime;
  const std::function<void(const std::string&, const std::string&)> fail =
      [&](const std::string& key, const std::string& msg) { throw ReaderError(stream, path, key, msg); };
  std::optional<zarr::Group> group;
  try {
    group = zarr::Group::open(path);
  } catch (const zarr::ZarrError& e) {
    fail("(store)", std::string("cannot open the obs store: ") + e.what());
  }
  const zarr::Group& g = *group;
  try {
    for (const char* a : {"data", "dates"})
      if (!g.has_array(a)) fail(a, "the store has no array '" + std::string(a) + "' (not an obs store?)");
    s.index_name = "idx_" + yyyymmddhhmm(base_datetime) + "_1";
    if (!g.has_array(s.index_name)) {
      std::string have;
      for (const std::string& a : g.arrays())
        if (a.rfind("idx_", 0) == 0) have += (have.empty() ? "" : ", ") + a;
      fail(s.index_name,
           "the store has no hourly index array '" + s.index_name + "' for base_datetime " + iso_date(base_datetime) +
               (have.empty() ? " (it has no idx_* array at all)" : " (it has: " + have + "; set base_datetime)"));
    }
    s.data = g.array("data", 4);
    const zarr::ArrayMeta& m = s.data->meta();
    if (m.shape.size() != 2 || (m.dtype != zarr::DType::F4 && m.dtype != zarr::DType::F8))
      fail("data", "must be a 2-D (rows, columns) table of <f4 or <f8, got " + std::to_string(m.shape.size()) + "-D " +
                       m.dtype_str);
    s.num_rows = m.shape[0];
    s.num_cols = m.shape[1];
    s.dates = g.array("dates", 4);
    const zarr::ArrayMeta& dm = s.dates->meta();
    if (dm.shape.empty() || dm.shape.size() > 2 || dm.shape[0] != s.num_rows ||
        (dm.dtype != zarr::DType::M8s && dm.dtype != zarr::DType::I8))
      fail("dates", "must be (rows[, k]) datetime64[s] with one row per row of 'data' (" + std::to_string(s.num_rows) +
                        "), got " + dm.dtype_str);
    s.date_cols = dm.shape.size() == 2 ? dm.shape[1] : 1;
    if (s.date_cols < 1) fail("dates", "has no column");
    s.index = g.array(s.index_name);
    s.hourly = s.index->read_all_i64();
    if (s.hourly.empty()) fail(s.index_name, "is empty");

    // Columns.
    const nlohmann::json attrs = read_json_file(path + "/data/.zattrs");
    if (!attrs.contains("colnames") || !attrs["colnames"].is_array())
      fail("data/.zattrs colnames", "is missing: the table's column names");
    for (const auto& c : attrs["colnames"]) s.colnames.push_back(c.get<std::string>());
    if (int64_t(s.colnames.size()) != s.num_cols)
      fail("data/.zattrs colnames",
           "names " + std::to_string(s.colnames.size()) + " columns but 'data' has " + std::to_string(s.num_cols));
    std::vector<std::string> obs_names;
    std::vector<int64_t> obs_cols;
    for (int64_t c = 0; c < s.num_cols; ++c) {
      const std::string& n = s.colnames[size_t(c)];
      if (n == "lat" && s.lat_col < 0) s.lat_col = c;
      if (n == "lon" && s.lon_col < 0) s.lon_col = c;
      if (n.find("obsvalue") != std::string::npos) {
        obs_names.push_back(n);
        obs_cols.push_back(c);
      }
    }
    if (s.lat_col < 0 || s.lon_col < 0)
      fail("data/.zattrs colnames",
           std::string("has no column '") + (s.lat_col < 0 ? "lat" : "lon") + "' (the observation coordinates)");
    if (obs_cols.empty()) fail("data/.zattrs colnames", "has no 'obsvalue' column (no data channel)");
    for (int64_t c = s.lon_col + 1; c < obs_cols.front(); ++c) s.geo_cols.push_back(c);

    // Channels.
    check_includes_match(stream, path, "source", rules.source, obs_names);
    check_includes_match(stream, path, "target", rules.target, obs_names);
    for (size_t j = 0; j < obs_names.size(); ++j) {
      if (channel_selected(obs_names[j], rules.source, rules.source_exclude)) s.src_cols.push_back(obs_cols[j]);
      if (channel_selected(obs_names[j], rules.target, rules.target_exclude)) s.tgt_cols.push_back(obs_cols[j]);
    }
    if (s.src_cols.empty()) fail("source", "the rules (source, source_exclude) leave no obsvalue column");
    if (s.tgt_cols.empty()) fail("target", "the rules (target, target_exclude) leave no obsvalue column");

    // Statistics: stdev = sqrt(var).
    const std::vector<double> means = number_list(attrs, "means", size_t(s.num_cols), fail);
    const std::vector<double> vars = number_list(attrs, "vars", size_t(s.num_cols), fail);
    auto add = [&](const std::vector<int64_t>& cols, std::vector<std::string>& names, std::vector<double>& mu,
                   std::vector<double>& sd) {
      for (int64_t c : cols) {
        const double sdev = std::sqrt(vars[size_t(c)]);
        check_statistics(stream, path, "data/.zattrs means/vars", s.colnames[size_t(c)], means[size_t(c)], sdev);
        names.push_back(s.colnames[size_t(c)]);
        mu.push_back(means[size_t(c)]);
        sd.push_back(sdev);
      }
    };
    add(s.src_cols, channels_.source, channels_.source_mean, channels_.source_stdev);
    add(s.tgt_cols, channels_.target, channels_.target_mean, channels_.target_stdev);
    add(s.geo_cols, channels_.geoinfos, channels_.geoinfo_mean, channels_.geoinfo_stdev);
  } catch (const zarr::ZarrError& e) {
    fail("(metadata)", e.what());
  } catch (const nlohmann::json::exception& e) {
    fail("data/.zattrs", std::string("cannot be read: ") + e.what());
  }
}

ObsReader::~ObsReader() = default;

int64_t ObsReader::num_rows() const { return s_->num_rows; }
const std::vector<std::string>& ObsReader::colnames() const { return s_->colnames; }
const std::string& ObsReader::index_array() const { return s_->index_name; }
const std::vector<int64_t>& ObsReader::source_columns() const { return s_->src_cols; }
const std::vector<int64_t>& ObsReader::target_columns() const { return s_->tgt_cols; }
const std::vector<int64_t>& ObsReader::geoinfo_columns() const { return s_->geo_cols; }

// ---- locating a window -------------------------------------------------------------

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

}  // namespace

std::pair<int64_t, int64_t> ObsReader::State::row_range(const TimeWindow& window) const {
  const int64_t n = int64_t(hourly.size());
  const int64_t h0 = floor_div(window.start - base, 3600);
  const int64_t h1 = ceil_div(window.end - base, 3600);
  auto clamp_row = [&](int64_t r) { return std::max<int64_t>(0, std::min(r, num_rows)); };
  const int64_t lo = h0 < 0 ? 0 : clamp_row(hourly[size_t(std::min(h0, n - 1))]);
  const int64_t hi = h1 < 0 ? 0 : h1 <= n - 1 ? clamp_row(hourly[size_t(h1)]) : num_rows;
  return {std::max<int64_t>(0, lo - 1), std::min(num_rows, std::max(hi, lo) + 1)};
}

void ObsReader::State::locate(const TimeWindow& window, const std::string& stream, const std::string& file,
                              std::vector<int64_t>& rows, std::vector<int64_t>& times) const {
  rows.clear();
  times.clear();
  const auto [lo, hi] = row_range(window);
  if (hi <= lo) return;
  std::vector<int64_t> d(size_t((hi - lo) * date_cols));  // [hi − lo, date_cols]
  try {
    if (dates->meta().shape.size() == 2)
      dates->read({lo, 0}, {hi - lo, date_cols}, d.data());
    else
      dates->read({lo}, {hi - lo}, d.data());
  } catch (const zarr::ZarrError& e) {
    throw UnreadableWindow(stream, file, "dates",
                           "cannot read rows " + std::to_string(lo) + " … " + std::to_string(hi) + ": " + e.what());
  }
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t t = d[size_t((r - lo) * date_cols)];
    if (t >= window.start && t < window.end) {
      rows.push_back(r);
      times.push_back(t);
    }
  }
}

std::pair<int64_t, int64_t> ObsReader::row_range(const TimeWindow& window) const { return s_->row_range(window); }

std::vector<int64_t> ObsReader::window_rows(const TimeWindow& window) const {
  std::vector<int64_t> rows, times;
  s_->locate(window, stream_, file_, rows, times);
  return rows;
}

// ---- reading a window --------------------------------------------------------------

void ObsReader::read(const TimeWindow& window, PointSet* source, PointSet* target) const {
  const State& s = *s_;
  if (source) reset_points(*source, true);
  if (target) reset_points(*target, false);
  if (!source && !target) return;
  std::vector<int64_t> rows, times;
  s.locate(window, stream_, file_, rows, times);
  if (rows.empty()) return;
  // The table rows [first, last] as float32: [cnt, n_cols].
  const int64_t lo = rows.front(), cnt = rows.back() + 1 - lo;
  const size_t nc = size_t(s.num_cols);
  std::vector<float> table(size_t(cnt) * nc);
  try {
    if (s.data->meta().dtype == zarr::DType::F4) {
      s.data->read({lo, 0}, {cnt, s.num_cols}, table.data());
    } else {
      std::vector<double> t64(table.size());
      s.data->read({lo, 0}, {cnt, s.num_cols}, t64.data());
      std::transform(t64.begin(), t64.end(), table.begin(), [](double v) { return static_cast<float>(v); });
    }
  } catch (const zarr::ZarrError& e) {
    throw UnreadableWindow(stream_, file_, "data",
                           "cannot read rows " + std::to_string(lo) + " … " + std::to_string(lo + cnt) +
                               " of the window " + iso_date(window.start) + " … " + iso_date(window.end) + ": " +
                               e.what());
  }
  const ReaderChannels& ch = channels_;
  auto fill = [&](PointSet& out, const std::vector<int64_t>& cols, const std::vector<double>& mu,
                  const std::vector<double>& sd) {
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* row = table.data() + size_t(rows[i] - lo) * nc;
      const float la = row[s.lat_col], lo_ = row[s.lon_col];
      if (std::isnan(la) || std::isnan(lo_)) continue;  // §3.3 step 2
      out.lat.push_back(la);
      out.lon.push_back(lo_);
      out.times.push_back(times[i]);
      for (size_t g = 0; g < s.geo_cols.size(); ++g)
        out.geoinfos.push_back(normalise_value(row[s.geo_cols[g]], ch.geoinfo_mean[g], ch.geoinfo_stdev[g]));
      for (size_t c = 0; c < cols.size(); ++c) out.data.push_back(normalise_value(row[cols[c]], mu[c], sd[c]));
    }
  };
  if (source) fill(*source, s.src_cols, ch.source_mean, ch.source_stdev);
  if (target) fill(*target, s.tgt_cols, ch.target_mean, ch.target_stdev);
}

}  // namespace wg
