// The Pushgateway push (see include/wg/telemetry/push.h): URL parsing, the
// grouping key's path, and prometheus::Gateway::PushAdd on a thread of its
// own so that the caller waits no longer than the deadline.
#include "wg/telemetry/push.h"

#include <curl/curl.h>
#include <prometheus/gateway.h>

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace wg::telemetry {

namespace {

bool safe_segment(const std::string& v) {
  if (v.empty()) return false;
  for (unsigned char c : v)
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-')) return false;
  return true;
}

std::string base64url(const std::string& in) {
  static constexpr char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
    out += {tbl[v >> 18 & 63], tbl[v >> 12 & 63], tbl[v >> 6 & 63], tbl[v & 63]};
  }
  if (i + 1 == in.size()) {
    unsigned v = (unsigned char)in[i] << 16;
    out += {tbl[v >> 18 & 63], tbl[v >> 12 & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
    out += {tbl[v >> 18 & 63], tbl[v >> 12 & 63], tbl[v >> 6 & 63], '='};
  }
  return out;
}

// The grouping key's instance as a Gateway label. Gateway appends labels
// verbatim as /key/value, so a value with '/' (or any unsafe character)
// would change the path: such a value goes as "instance@base64/<base64url>"
// ("=" for the empty value), which the Pushgateway decodes.
prometheus::Labels instance_label(const std::string& instance) {
  if (safe_segment(instance)) return {{"instance", instance}};
  return {{"instance@base64", instance.empty() ? std::string("=") : base64url(instance)}};
}

// One push, shared by the caller and the push's thread; whichever leaves
// last frees it.
struct PushState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;  // the caller stopped waiting
  int status = 0;          // HTTP status, or -CURLcode
  std::string exception;
  std::unique_ptr<prometheus::Gateway> gateway;
};

std::string describe(int status) {
  if (status < 0) return std::string("curl: ") + curl_easy_strerror(CURLcode(-status));
  return "HTTP " + std::to_string(status);
}

}  // namespace

bool parse_http_url(const std::string& url, HttpUrl* out, std::string* error) {
  auto fail = [&](const std::string& msg) {
    if (error) *error = "invalid pushgateway URL '" + url + "': " + msg;
    return false;
  };
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) return fail("only http://host:port is supported");
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find_first_of("/?#@ ") != std::string::npos) return fail("expected http://host:port with no path");
  HttpUrl u;
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) return fail("unclosed '[' in the host");
    u.host = rest.substr(1, close - 1);
    std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return fail("unexpected text after the host");
      port_text = after.substr(1);
      if (port_text.empty()) return fail("empty port");
    }
  } else {
    size_t colon = rest.find(':');
    u.host = rest.substr(0, colon);
    if (colon != std::string::npos) {
      port_text = rest.substr(colon + 1);
      if (port_text.empty()) return fail("empty port");
    }
  }
  if (u.host.empty()) return fail("empty host");
  if (!port_text.empty()) {
    if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos)
      return fail("bad port '" + port_text + "'");
    u.port = std::stoi(port_text);
    if (u.port < 1 || u.port > 65535) return fail("port out of range");
  }
  if (out) *out = u;
  return true;
}

std::string pushgateway_path(const std::string& job, const std::string& instance) {
  std::string path = "/metrics/job/" + job;
  for (const auto& [key, value] : instance_label(instance)) path += "/" + key + "/" + value;
  return path;
}

bool push_to_gateway(const std::string& url, const std::string& job, const std::string& instance,
                     std::shared_ptr<prometheus::Collectable> metrics, std::string* error,
                     const PushOptions& options) {
  auto fail = [&](const std::string& msg) {
    if (error) *error = "pushgateway " + url + ": " + msg;
    return false;
  };
  try {
    HttpUrl u;
    std::string why;
    if (!parse_http_url(url, &u, &why)) {
      if (error) *error = why;
      return false;
    }
    // Gateway puts the job into the path as it is ("job@base64" is out of its reach).
    if (!safe_segment(job)) return fail("job name '" + job + "' must be made of [A-Za-z0-9._~-]");
    if (!metrics) return fail("nothing to push");
    const std::string host = "http://" + (u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host);

    auto state = std::make_shared<PushState>();
    // Made here, so that curl's global initialisation runs on the caller's thread.
    state->gateway = std::make_unique<prometheus::Gateway>(host, std::to_string(u.port), job, instance_label(instance));
    state->gateway->RegisterCollectable(metrics);  // a weak reference: the thread holds `metrics` too

    // Gateway's curl handle has no timeout, and a silent Pushgateway would
    // hold it forever: the push runs on its own thread, and the caller waits
    // for it until the deadline only.
    std::thread([state, metrics] {
      int status = 0;
      std::string what;
      try {
        status = state->gateway->PushAdd();  // HTTP PUT: replaces the group (Gateway::Push is a POST)
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
        what = "unknown exception";
      }
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->abandoned) {
        // Nobody waits any more, and the process may be exiting: Gateway's
        // destructor (curl_easy_cleanup, curl_global_cleanup) could run
        // while exit tears down the libraries curl uses, so one curl handle
        // is left to the operating system instead.
        (void)state->gateway.release();
        return;
      }
      state->status = status;
      state->exception = what;
      state->done = true;
      state->cv.notify_all();
    }).detach();

    const int timeout_ms = options.timeout_ms > 0 ? options.timeout_ms : 1;
    std::unique_lock<std::mutex> lock(state->mu);
    if (!state->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return state->done; })) {
      state->abandoned = true;
      return fail("timed out after " + std::to_string(timeout_ms) + " ms (the push is abandoned)");
    }
    std::unique_ptr<prometheus::Gateway> gateway = std::move(state->gateway);
    lock.unlock();
    gateway.reset();  // curl's cleanup on this thread, as its initialisation
    if (!state->exception.empty()) return fail(state->exception);
    if (state->status < 200 || state->status > 299) return fail(describe(state->status));
    return true;
  } catch (const std::exception& e) {  // Gateway's curl initialisation, std::thread, memory
    return fail(e.what());
  }
}

}  // namespace wg::telemetry
