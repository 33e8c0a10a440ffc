// The push of the job's outcome to a Prometheus Pushgateway: prometheus-cpp's
// Gateway (libcurl) does the HTTP PUT; this owns the URL check, the
// grouping key's encoding and the deadline, which Gateway lacks. Failures
// (bad URL, unreachable, non-2xx, timeout) return false and a one-line error;
// nothing here throws.
#pragma once

#include <memory>
#include <string>

#include <prometheus/collectable.h>

namespace wg::telemetry {

struct HttpUrl {
  std::string host;  // without brackets for IPv6
  int port = 80;
};

// Parses "http://host[:port][/]" (IPv6 as "http://[::1]:9091"). Anything else
// (https, a path, user info, a bad port) returns false and sets *error.
bool parse_http_url(const std::string& url, HttpUrl* out, std::string* error);

// The path of a job and instance's group; a value that is empty or holds
// characters outside [A-Za-z0-9._~-] is sent base64url-encoded
// ("instance@base64/..."), which the Pushgateway decodes.
std::string pushgateway_path(const std::string& job, const std::string& instance);

struct PushOptions {
  int timeout_ms = 2000;  // the whole push: connect, send, response
};

// PUTs what `metrics` collects to `url`'s group job/instance (replacing the
// group). Returns true on a 2xx answer. At the deadline it stops waiting and
// returns false; the push goes on in the background, owns what it uses, and
// neither blocks nor disturbs the process's exit.
bool push_to_gateway(const std::string& url, const std::string& job, const std::string& instance,
                     std::shared_ptr<prometheus::Collectable> metrics, std::string* error,
                     const PushOptions& options = {});

}  // namespace wg::telemetry
