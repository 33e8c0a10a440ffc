// The shared part of every stream reader: convenience reads, channel rules,
// statistics checks and appending point sets (see header).
#include "wg/data/stream_reader.h"

#include <cmath>

namespace wg {

PointSet StreamReader::source(const TimeWindow& window) const {
  PointSet out;
  read(window, &out, nullptr);
  return out;
}

PointSet StreamReader::target(const TimeWindow& window) const {
  PointSet out;
  read(window, nullptr, &out);
  return out;
}

void StreamReader::reset_points(PointSet& p, bool source, bool clear_data) const {
  p.num_geoinfos = num_geoinfos();
  p.num_channels = static_cast<int>(source ? channels_.source.size() : channels_.target.size());
  p.lat.clear();
  p.lon.clear();
  p.geoinfos.clear();
  p.times.clear();
  if (clear_data) p.data.clear();
}

bool channel_selected(const std::string& name, const std::optional<std::vector<std::string>>& include,
                      const std::vector<std::string>& exclude) {
  bool in = !include;
  if (include)
    for (const std::string& s : *include) in = in || name.find(s) != std::string::npos;
  if (!in) return false;
  for (const std::string& s : exclude) {
    if (name.find(s) != std::string::npos) return false;
  }
  return true;
}

void check_includes_match(const std::string& stream, const std::string& file, const std::string& key,
                          const std::optional<std::vector<std::string>>& include,
                          const std::vector<std::string>& candidates) {
  if (!include) return;
  for (const std::string& entry : *include) {
    bool hit = false;
    for (const std::string& c : candidates) hit = hit || c.find(entry) != std::string::npos;
    if (!hit) {
      std::string names;
      for (size_t i = 0; i < candidates.size() && i < 12; ++i) names += (i ? ", " : "") + candidates[i];
      if (candidates.size() > 12) names += ", … (" + std::to_string(candidates.size()) + " in all)";
      throw ReaderError(stream, file, key,
                        "entry '" + entry + "' matches no selectable channel (candidates: " + names + ")");
    }
  }
}

void check_statistics(const std::string& stream, const std::string& file, const std::string& key,
                      const std::string& channel, double mean, double stdev) {
  if (!std::isfinite(mean) || !std::isfinite(stdev) || !(stdev > 0.0)) {
    throw ReaderError(stream, file, key,
                      "channel '" + channel + "' has mean " + std::to_string(mean) + " and stdev " +
                          std::to_string(stdev) + ", which cannot normalise it; exclude it from the stream");
  }
}

void append_points(PointSet& into, const PointSet& more, const std::string& stream, const std::string& file) {
  if (into.empty() && into.num_channels == 0 && into.num_geoinfos == 0) {
    into.num_channels = more.num_channels;
    into.num_geoinfos = more.num_geoinfos;
  }
  if (into.num_channels != more.num_channels || into.num_geoinfos != more.num_geoinfos) {
    throw ReaderError(stream, file, "filenames",
                      "has " + std::to_string(more.num_channels) + " channels and " +
                          std::to_string(more.num_geoinfos) + " geoinfos, the stream's first file " +
                          std::to_string(into.num_channels) + " and " + std::to_string(into.num_geoinfos) +
                          ": the files of a stream must have the same columns");
  }
  into.lat.insert(into.lat.end(), more.lat.begin(), more.lat.end());
  into.lon.insert(into.lon.end(), more.lon.begin(), more.lon.end());
  into.geoinfos.insert(into.geoinfos.end(), more.geoinfos.begin(), more.geoinfos.end());
  into.data.insert(into.data.end(), more.data.begin(), more.data.end());
  into.times.insert(into.times.end(), more.times.begin(), more.times.end());
}

}  // namespace wg
