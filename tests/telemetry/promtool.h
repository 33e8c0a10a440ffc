// Test helper for the telemetry suites: runs `promtool check metrics` (the
// Prometheus project's own linter of the text format) on a text.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace wg::telemetry::testing {

inline bool have_promtool() { return ::access("/usr/bin/promtool", X_OK) == 0; }

// Runs `promtool check metrics` with `text` on stdin; returns (exit code, output).
inline std::pair<int, std::string> promtool_check(const std::string& text) {
  char path[] = "/tmp/wg_promtool_XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) return {-1, "mkstemp failed"};
  if (::write(fd, text.data(), text.size()) != ssize_t(text.size())) return {-1, "write failed"};
  ::close(fd);
  std::string cmd = std::string("/usr/bin/promtool check metrics < ") + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = ::pclose(p);
  ::unlink(path);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace wg::telemetry::testing
