// The Pushgateway client: URL parsing, grouping-key path encoding, and one
// HTTP/1.1 PUT over a non-blocking socket with a deadline.
#include "wg/telemetry/pushgateway.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "wg/telemetry/metrics.h"

namespace wg::telemetry {

namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? int(left) : 0;
}

// Closes the socket on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool safe_segment(const std::string& v) {
  if (v.empty()) return false;
  for (unsigned char c : v)
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-')) return false;
  return true;
}

std::string base64url(const std::string& in) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
    out += tbl[v >> 18 & 63];
    out += tbl[v >> 12 & 63];
    out += tbl[v >> 6 & 63];
    out += tbl[v & 63];
  }
  if (i + 1 == in.size()) {
    unsigned v = (unsigned char)in[i] << 16;
    out += tbl[v >> 18 & 63];
    out += tbl[v >> 12 & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
    out += tbl[v >> 18 & 63];
    out += tbl[v >> 12 & 63];
    out += tbl[v >> 6 & 63];
    out += '=';
  }
  return out;
}

std::string segment(const std::string& key, const std::string& value) {
  if (safe_segment(value)) return "/" + key + "/" + value;
  // The Pushgateway reads "=" as the empty value.
  return "/" + key + "@base64/" + (value.empty() ? std::string("=") : base64url(value));
}

// Connects to one of `host`'s addresses before the deadline.
int connect_before(const HttpUrl& u, Clock::time_point deadline, std::string* why) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(u.port);
  int rc = ::getaddrinfo(u.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    *why = std::string("cannot resolve host: ") + gai_strerror(rc);
    return -1;
  }
  *why = "no address";
  int result = -1;
  for (addrinfo* ai = res; ai && result < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *why = std::strerror(errno);
      continue;
    }
    int c = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (c != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int pr;
      do pr = ::poll(&p, 1, remaining_ms(deadline));
      while (pr < 0 && errno == EINTR);
      if (pr == 0) {
        *why = "connect timed out";
        ::close(fd);
        break;  // the deadline is spent
      }
      int soerr = 0;
      socklen_t len = sizeof soerr;
      if (pr < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) soerr = errno;
      c = soerr == 0 ? 0 : -1;
      if (soerr) errno = soerr;
    }
    if (c == 0) result = fd;
    else {
      *why = std::string("connect: ") + std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  return result;
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
  return "/metrics" + segment("job", job) + segment("instance", instance);
}

bool push_to_gateway(const std::string& url, const std::string& job, const std::string& instance,
                     const std::string& body, std::string* error, const PushOptions& options) {
  auto fail = [&](const std::string& msg) {
    if (error) *error = "pushgateway " + url + ": " + msg;
    return false;
  };
  try {
    HttpUrl u;
    if (!parse_http_url(url, &u, error)) return false;
    if (job.empty()) return fail("empty job name");
    const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms > 0 ? options.timeout_ms : 1);

    std::string why;
    Fd sock{connect_before(u, deadline, &why)};
    if (sock.fd < 0) return fail(why);

    const std::string host_header =
        (u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host) + ":" + std::to_string(u.port);
    std::string req = "PUT " + pushgateway_path(job, instance) + " HTTP/1.1\r\n" +
                      "Host: " + host_header + "\r\n" +
                      "Content-Type: " + kTextContentType + "\r\n" +
                      "Content-Length: " + std::to_string(body.size()) + "\r\n" +
                      "Connection: close\r\n\r\n" + body;
    size_t sent = 0;
    while (sent < req.size()) {
      pollfd p{sock.fd, POLLOUT, 0};
      int pr = ::poll(&p, 1, remaining_ms(deadline));
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) return fail(pr == 0 ? "timed out sending" : std::string("poll: ") + std::strerror(errno));
      ssize_t n = ::send(sock.fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return fail(std::string("send: ") + std::strerror(errno));
      }
      sent += size_t(n);
    }

    // Read until the server closes, or the headers and Content-Length bytes are in.
    std::string resp;
    char buf[4096];
    for (;;) {
      size_t hdr_end = resp.find("\r\n\r\n");
      if (hdr_end != std::string::npos) {
        std::string head = resp.substr(0, hdr_end);
        for (char& c : head) c = char(std::tolower((unsigned char)c));
        size_t cl = head.find("\r\ncontent-length:");
        if (cl != std::string::npos &&
            resp.size() >= hdr_end + 4 + size_t(std::strtoull(head.c_str() + cl + 17, nullptr, 10)))
          break;
      }
      if (resp.size() > (1u << 20)) break;  // enough to read a status line
      pollfd p{sock.fd, POLLIN, 0};
      int pr = ::poll(&p, 1, remaining_ms(deadline));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) return fail("timed out waiting for the response");
      if (pr < 0) return fail(std::string("poll: ") + std::strerror(errno));
      ssize_t n = ::recv(sock.fd, buf, sizeof buf, 0);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return fail(std::string("recv: ") + std::strerror(errno));
      }
      if (n == 0) break;
      resp.append(buf, size_t(n));
    }
    int status = 0;
    if (resp.compare(0, 5, "HTTP/") != 0 || std::sscanf(resp.c_str(), "HTTP/%*s %d", &status) != 1)
      return fail("no HTTP response");
    if (status < 200 || status > 299) {
      size_t hdr_end = resp.find("\r\n\r\n");
      std::string detail = hdr_end == std::string::npos ? "" : resp.substr(hdr_end + 4, 200);
      for (char& c : detail)
        if (c == '\n' || c == '\r') c = ' ';
      return fail("HTTP " + std::to_string(status) + (detail.empty() ? "" : ": " + detail));
    }
    return true;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

}  // namespace wg::telemetry
