// Serves a Registry's text exposition on GET /metrics over HTTP (civetweb).
// Starting never throws: a failure (port in use, bad address) returns nullptr
// and a one-line error, so the trainer logs a warning and goes on.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

struct mg_context;
struct mg_connection;

namespace wg::telemetry {

class Registry;

struct HttpExporterOptions {
  int num_threads = 4;               // civetweb worker threads
  int request_timeout_ms = 3000;     // a slow or silent client is dropped after this
  int max_request_size = 16384;      // bytes of request line + headers
};

class HttpExporter {
 public:
  // Listens on `address`:`port` ("127.0.0.1", "0.0.0.0", "::1"; "" = every
  // interface). Port 0 lets the OS pick a free port; port() reports it.
  // Returns nullptr and sets *error (if given) on failure; never throws.
  static std::unique_ptr<HttpExporter> start(Registry& registry, std::string address, int port,
                                             std::string* error, const HttpExporterOptions& options = {});
  ~HttpExporter();  // stops the server; in-flight scrapes finish first
  HttpExporter(const HttpExporter&) = delete;
  HttpExporter& operator=(const HttpExporter&) = delete;

  int port() const { return port_; }                 // the bound port
  const std::string& address() const { return address_; }
  uint64_t scrapes() const { return scrapes_.load(); }  // successful GET /metrics

 private:
  explicit HttpExporter(Registry& registry) : registry_(registry) {}
  static int handle(mg_connection* conn);

  Registry& registry_;
  mg_context* ctx_ = nullptr;
  std::string address_;
  int port_ = 0;
  std::atomic<uint64_t> scrapes_{0};
};

}  // namespace wg::telemetry
