// The /metrics HTTP endpoint: prometheus-cpp's Exposer (civetweb inside)
// serving a Collectable, with the civetweb options that keep slow clients
// from blinding it, strict routing in front of the Exposer, and start-up
// failures turned into one line. Starting never throws: a failure (port in
// use, bad address) returns nullptr and an error, so the trainer logs a
// warning and goes on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <prometheus/collectable.h>

namespace prometheus {
class Exposer;
}

namespace wg::telemetry {

struct EndpointOptions {
  // civetweb serves one connection per worker thread, and a client that
  // sends half a request holds its worker until request_timeout_ms: enough
  // workers that 64 such clients leave most of them free for Prometheus.
  int num_threads = 96;
  // The whole request line and headers must arrive within this (civetweb
  // also drops a response that makes no progress for this long).
  int request_timeout_ms = 2000;
  int max_request_size = 16384;  // bytes of request line + headers
};

class MetricsEndpoint {
 public:
  // Serves what `metrics` collects (and the Exposer's own exposer_*
  // families) on GET /metrics at `address`:`port` ("127.0.0.1", "0.0.0.0",
  // "::1"; "" = every interface). Port 0 lets the OS pick; port() reports it.
  // Returns nullptr and sets *error (one line naming the address and port)
  // on failure; never throws.
  static std::unique_ptr<MetricsEndpoint> start(std::weak_ptr<prometheus::Collectable> metrics,
                                                const std::string& address, int port, std::string* error,
                                                const EndpointOptions& options = {});
  ~MetricsEndpoint();  // stops the server; in-flight scrapes finish first
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }  // the bound port
  const std::string& address() const { return address_; }
  uint64_t scrapes() const;  // GET /metrics requests served

 private:
  class Counting;
  MetricsEndpoint() = default;

  std::string address_;
  int port_ = 0;
  std::shared_ptr<Counting> counting_;            // what the Exposer collects from
  std::unique_ptr<prometheus::Exposer> exposer_;  // declared last: stops first
};

}  // namespace wg::telemetry
