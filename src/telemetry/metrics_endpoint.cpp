// The /metrics endpoint (see include/wg/telemetry/metrics_endpoint.h):
// prometheus-cpp's Exposer with civetweb options, a begin_request callback
// for the routing the Exposer does not do, a Collectable that counts
// scrapes, and the diagnosis of a failed start.
#include "wg/telemetry/metrics_endpoint.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <netdb.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <vector>

#include "wg/telemetry/thread_stack.h"

namespace wg::telemetry {

namespace {

constexpr const char* kPath = "/metrics";

// The Exposer's handler answers every path that starts with /metrics
// (/metricsx, /metrics/x) and every method, with 404/405 and no Allow
// header for the latter. civetweb calls begin_request first, after the
// request is parsed: anything but exactly GET /metrics (a query string is
// not part of local_uri) is answered here, and a non-zero return keeps it
// from the Exposer.
int route(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const char* uri = ri && ri->local_uri ? ri->local_uri : "";
  const char* method = ri && ri->request_method ? ri->request_method : "";
  if (std::strcmp(uri, kPath) == 0 && std::strcmp(method, "GET") == 0) return 0;  // the Exposer serves it
  const bool wrong_path = std::strcmp(uri, kPath) != 0;
  const int code = wrong_path ? 404 : 405;
  const char* status = wrong_path ? "Not Found" : "Method Not Allowed";
  const char* body = wrong_path ? "404 not found: the metrics are at /metrics\n" : "405 method not allowed: use GET\n";
  const char* extra = wrong_path ? "" : "Allow: GET\r\n";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: %zu\r\n"
            "%s"
            "Connection: close\r\n\r\n%s",
            code, status, std::strlen(body), extra, body);
  return code;
}

// civetweb prints to stderr unless a callback takes its messages; start()
// reports its own error, and a bad request is the client's business.
int quiet(const mg_connection*, const char*) { return 1; }

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Why `address`:`port` cannot be listened on, found by trying it: civetweb
// reports the reason only to its log callback, which cannot reach us
// (prometheus-cpp owns the server's user data).
std::string why_not_listening(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return std::string("invalid address: ") + gai_strerror(rc);
  std::string why;
  int fd = ::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
  if (fd < 0) {
    why = std::strerror(errno);
  } else {
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as civetweb does
    if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0) why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return why;
}

}  // namespace

// Forwards to the metrics and counts the collections: the Exposer collects
// once per GET /metrics it serves.
class MetricsEndpoint::Counting : public prometheus::Collectable {
 public:
  explicit Counting(std::weak_ptr<prometheus::Collectable> metrics) : metrics_(std::move(metrics)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    scrapes_.fetch_add(1, std::memory_order_relaxed);
    try {
      if (auto m = metrics_.lock()) return m->Collect();
    } catch (const std::exception&) {  // out of memory: an empty scrape, never an exception into civetweb's C
    }
    return {};
  }
  uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }

 private:
  std::weak_ptr<prometheus::Collectable> metrics_;
  mutable std::atomic<uint64_t> scrapes_{0};
};

uint64_t MetricsEndpoint::scrapes() const { return counting_->scrapes(); }

MetricsEndpoint::~MetricsEndpoint() = default;

std::unique_ptr<MetricsEndpoint> MetricsEndpoint::start(std::weak_ptr<prometheus::Collectable> metrics,
                                                        const std::string& address, int port, std::string* error,
                                                        const EndpointOptions& options) {
  auto fail = [&](const std::string& msg) -> std::unique_ptr<MetricsEndpoint> {
    if (error) *error = one_line("metrics endpoint: " + msg);
    return nullptr;
  };
  if (port < 0 || port > 65535) return fail("port " + std::to_string(port) + " is out of range 0..65535");
  if (address.find_first_of(" ,\t\r\n") != std::string::npos) return fail("invalid address '" + address + "'");
  std::string listen;
  if (address.empty()) listen = std::to_string(port);
  else if (address.find(':') != std::string::npos) listen = "[" + address + "]:" + std::to_string(port);  // IPv6
  else listen = address + ":" + std::to_string(port);

  try {
    std::unique_ptr<MetricsEndpoint> self(new MetricsEndpoint());
    self->address_ = address;
    self->counting_ = std::make_shared<Counting>(std::move(metrics));
    CivetCallbacks callbacks;  // every other callback stays null (its constructor clears them)
    callbacks.begin_request = &route;
    callbacks.log_message = &quiet;
    std::vector<std::string> civetweb_options = {
        "listening_ports", listen,
        "num_threads", std::to_string(options.num_threads > 0 ? options.num_threads : 1),
        "request_timeout_ms", std::to_string(options.request_timeout_ms > 0 ? options.request_timeout_ms : 1000),
        "max_request_size", std::to_string(options.max_request_size >= 1024 ? options.max_request_size : 1024),
        "enable_keep_alive", "no"};
    try {
      self->exposer_ = std::make_unique<prometheus::Exposer>(std::move(civetweb_options), &callbacks);
    } catch (const std::exception& e) {
      std::string why = why_not_listening(address, port);
      if (why.empty()) why = e.what();  // the address is free: threads, most likely
      if (!thread_stack_floor_active())
        why += " (civetweb's threads get 100 KiB stacks: pthread_attr_setstacksize is not the executable's)";
      return fail("cannot listen on " + listen + ": " + why);
    }
    self->exposer_->RegisterCollectable(self->counting_);
    const std::vector<int> ports = self->exposer_->GetListeningPorts();
    if (ports.empty() || ports.front() <= 0) return fail("started on " + listen + " but cannot read the bound port");
    self->port_ = ports.front();
    return self;
  } catch (const std::exception& e) {
    return fail(std::string("cannot start on ") + listen + ": " + e.what());
  }
}

}  // namespace wg::telemetry
