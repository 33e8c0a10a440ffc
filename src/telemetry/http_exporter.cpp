// The /metrics HTTP endpoint: civetweb server setup, request routing
// (GET /metrics -> 200, other paths -> 404, other methods -> 405) and shutdown.
#include "wg/telemetry/http_exporter.h"

#include <civetweb.h>

#include <cstring>
#include <cerrno>
#include <dlfcn.h>
#include <pthread.h>
#include <exception>
#include <string>
#include <vector>

#include "wg/telemetry/metrics.h"

// civetweb (Debian's build) starts its threads with a fixed 100 KiB stack.
// glibc places a thread's static TLS on its stack, and a process that loads
// LibTorch, OpenBLAS, glog and ~300 libraries has more static TLS than that,
// so pthread_create fails with EINVAL ("Cannot create first worker thread").
// This definition, in the executable, takes precedence over libc's for
// every library (civetweb calls it through its PLT) and raises requests below
// 1 MiB to 1 MiB; larger requests pass unchanged.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Real = int (*)(pthread_attr_t*, size_t);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinimum = size_t(1) << 20;
  if (!real) return EINVAL;
  return real(attr, size < kMinimum ? kMinimum : size);
}

namespace wg::telemetry {

namespace {

// civetweb prints errors to stderr unless a callback takes them; start()
// reports its own error, and a bad request is the client's business.
int quiet_log(const mg_connection*, const char*) { return 1; }

void send_text(mg_connection* conn, int status, const char* reason, const std::string& body,
               const char* content_type, const char* extra_header = "") {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\n"
            "Content-Type: %s\r\n"
            "Content-Length: %zu\r\n"
            "Cache-Control: no-store\r\n"
            "%s"
            "Connection: close\r\n\r\n",
            status, reason, content_type, body.size(), extra_header);
  if (!body.empty()) mg_write(conn, body.data(), body.size());
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

int HttpExporter::handle(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  auto* self = static_cast<HttpExporter*>(ri->user_data);
  const char* uri = ri->local_uri ? ri->local_uri : "";
  const char* method = ri->request_method ? ri->request_method : "";
  const char* plain = "text/plain; charset=utf-8";
  if (std::strcmp(uri, "/metrics") != 0) {
    send_text(conn, 404, "Not Found", "404 not found: the metrics are at /metrics\n", plain);
    return 404;
  }
  if (std::strcmp(method, "GET") != 0) {
    send_text(conn, 405, "Method Not Allowed", "405 method not allowed: use GET\n", plain, "Allow: GET\r\n");
    return 405;
  }
  std::string body;
  try {
    body = self->registry_.serialize();
  } catch (const std::exception& e) {  // out of memory: answer, do not unwind into C
    send_text(conn, 500, "Internal Server Error", std::string("500 ") + e.what() + "\n", plain);
    return 500;
  }
  send_text(conn, 200, "OK", body, kTextContentType);
  self->scrapes_.fetch_add(1);
  return 200;
}

std::unique_ptr<HttpExporter> HttpExporter::start(Registry& registry, std::string address, int port,
                                                  std::string* error, const HttpExporterOptions& options) {
  auto fail = [&](const std::string& msg) -> std::unique_ptr<HttpExporter> {
    if (error) *error = one_line(msg);
    return nullptr;
  };
  try {
    if (port < 0 || port > 65535)
      return fail("metrics HTTP exporter: port " + std::to_string(port) + " is out of range 0..65535");
    if (address.find_first_of(" ,\t\r\n") != std::string::npos)
      return fail("metrics HTTP exporter: invalid address '" + address + "'");
    std::string listen;
    if (address.empty()) listen = std::to_string(port);
    else if (address.find(':') != std::string::npos)  // IPv6
      listen = "[" + address + "]:" + std::to_string(port);
    else listen = address + ":" + std::to_string(port);

    std::unique_ptr<HttpExporter> self(new HttpExporter(registry));
    self->address_ = address;
    const std::string threads = std::to_string(options.num_threads > 0 ? options.num_threads : 1);
    const std::string timeout = std::to_string(options.request_timeout_ms > 0 ? options.request_timeout_ms : 1000);
    const std::string max_req = std::to_string(options.max_request_size >= 1024 ? options.max_request_size : 1024);
    const char* opts[] = {"listening_ports", listen.c_str(),
                          "num_threads", threads.c_str(),
                          "request_timeout_ms", timeout.c_str(),
                          "max_request_size", max_req.c_str(),
                          "enable_keep_alive", "no",
                          nullptr};

    mg_callbacks callbacks;
    std::memset(&callbacks, 0, sizeof callbacks);
    callbacks.begin_request = &HttpExporter::handle;
    callbacks.log_message = &quiet_log;

    mg_init_library(0);
    char text[256] = {0};
    unsigned code = 0;
    mg_error_data err;
    err.code = &code;
    err.text = text;
    err.text_buffer_size = sizeof text;
    mg_init_data init;
    init.callbacks = &callbacks;
    init.user_data = self.get();
    init.configuration_options = opts;
    self->ctx_ = mg_start2(&init, &err);
    if (!self->ctx_) {
      mg_exit_library();
      std::string why = text[0] ? text : "civetweb could not start (error " + std::to_string(code) + ")";
      return fail("metrics HTTP exporter: cannot listen on " + listen + ": " + why);
    }
    mg_server_port ports[4];
    std::memset(ports, 0, sizeof ports);
    int n = mg_get_server_ports(self->ctx_, 4, ports);
    if (n < 1 || ports[0].port <= 0)
      return fail("metrics HTTP exporter: started on " + listen + " but cannot read the bound port");
    self->port_ = ports[0].port;
    return self;
  } catch (const std::exception& e) {
    return fail(std::string("metrics HTTP exporter: ") + e.what());
  }
}

HttpExporter::~HttpExporter() {
  if (ctx_) {
    mg_stop(ctx_);
    ctx_ = nullptr;
    mg_exit_library();
  }
}

}  // namespace wg::telemetry
