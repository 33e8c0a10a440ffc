// Writing and removing a Prometheus file_sd target file atomically
// (see include/wg/telemetry/file_sd.h).
#include "wg/telemetry/file_sd.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <prometheus/check_names.h>

namespace wg::telemetry {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    off += size_t(n);
  }
  return true;
}

}  // namespace

std::string file_sd_json(const std::vector<std::string>& targets, const Labels& labels) {
  nlohmann::json group;
  group["targets"] = targets;
  group["labels"] = nlohmann::json::object();
  for (const auto& [k, v] : labels) group["labels"][k] = v;
  // Invalid UTF-8 in a label is replaced rather than thrown on.
  return nlohmann::json::array({group}).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

bool FileSdTarget::write(const std::vector<std::string>& targets, const Labels& labels,
                         std::string* error) const {
  auto fail = [&](const std::string& msg) {
    if (error) *error = "file_sd " + path_ + ": " + msg;
    return false;
  };
  try {
    if (path_.empty()) return fail("empty path");
    for (const auto& kv : labels)
      if (!prometheus::CheckLabelName(kv.first)) return fail("invalid label name '" + kv.first + "'");
    for (const auto& t : targets)
      if (t.empty()) return fail("empty target");
    const std::string text = file_sd_json(targets, labels);

    // The temp file is a dot file next to the target, so a *.json glob in
    // Prometheus's file_sd_configs never picks it up.
    size_t slash = path_.rfind('/');
    std::string dir = slash == std::string::npos ? "" : path_.substr(0, slash + 1);
    std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
    std::string tmp = dir + "." + base + ".tmp.XXXXXX";
    std::vector<char> buf(tmp.begin(), tmp.end());
    buf.push_back('\0');
    int fd = ::mkstemp(buf.data());
    if (fd < 0) return fail("cannot create a temporary file in the directory: " + errno_text(errno));
    tmp.assign(buf.data());
    int e = 0;
    if (::fchmod(fd, 0644) != 0) e = errno;  // Prometheus may run as another user
    if (!e && !write_all(fd, text)) e = errno;
    if (!e && ::fsync(fd) != 0) e = errno;
    if (::close(fd) != 0 && !e) e = errno;
    if (!e && ::rename(tmp.c_str(), path_.c_str()) != 0) e = errno;
    if (e) {
      ::unlink(tmp.c_str());
      return fail("cannot write: " + errno_text(e));
    }
    return true;
  } catch (const std::exception& ex) {
    return fail(ex.what());
  }
}

bool FileSdTarget::remove(std::string* error) const {
  if (::unlink(path_.c_str()) == 0 || errno == ENOENT) return true;
  if (error) *error = "file_sd " + path_ + ": cannot remove: " + errno_text(errno);
  return false;
}

}  // namespace wg::telemetry
