// A Prometheus file_sd target file: [{"targets": ["host:port"], "labels": {...}}],
// written atomically (a temp file in the same directory, then rename) so
// Prometheus never reads half a file. Failures return false, never throw.
#pragma once

#include <prometheus/labels.h>

#include <string>
#include <vector>

namespace wg::telemetry {

// Label name -> value, sorted (prometheus-cpp's).
using Labels = prometheus::Labels;

class FileSdTarget {
 public:
  explicit FileSdTarget(std::string path) : path_(std::move(path)) {}

  // Writes (or replaces) the file with one target group. Label names must be
  // valid Prometheus label names. Returns false and sets *error on failure.
  bool write(const std::vector<std::string>& targets, const Labels& labels, std::string* error) const;
  // Deletes the file; a missing file counts as done.
  bool remove(std::string* error) const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The file's JSON text for one target group (no trailing newline handling
// needed by callers; exposed for tests).
std::string file_sd_json(const std::vector<std::string>& targets, const Labels& labels);

}  // namespace wg::telemetry
