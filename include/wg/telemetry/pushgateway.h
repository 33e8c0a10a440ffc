// Pushes a text-format body to a Prometheus Pushgateway with HTTP PUT
// (/metrics/job/<job>/instance/<instance>) over a plain socket, within a
// bounded time. Failures (unreachable, non-2xx, timeout) return false and a
// one-line error; nothing here throws.
#pragma once

#include <string>

namespace wg::telemetry {

struct HttpUrl {
  std::string host;  // without brackets for IPv6
  int port = 80;
};

// Parses "http://host[:port][/]" (IPv6 as "http://[::1]:9091"). Anything else
// (https, a path, user info, a bad port) returns false and sets *error.
bool parse_http_url(const std::string& url, HttpUrl* out, std::string* error);

// The path for a job and instance; a value that is empty or holds characters
// outside [A-Za-z0-9._~-] is sent base64url-encoded ("job@base64/...").
std::string pushgateway_path(const std::string& job, const std::string& instance);

struct PushOptions {
  int timeout_ms = 2000;  // the whole exchange: connect, send, response
};

// PUT `body` (text exposition format) to `url`'s group job/instance: replaces
// every metric of that group. Returns true on a 2xx answer.
bool push_to_gateway(const std::string& url, const std::string& job, const std::string& instance,
                     const std::string& body, std::string* error, const PushOptions& options = {});

}  // namespace wg::telemetry
