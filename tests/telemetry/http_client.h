// Test helpers for the telemetry suites: a plain-socket HTTP client (one
// request per connection, bounded by socket timeouts) and a free-port finder.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace wg::telemetry::testing {

struct HttpResponse {
  bool connected = false;
  int status = 0;        // 0: no status line came back
  std::string headers;   // status line and headers
  std::string body;
  std::string header(const std::string& name) const {
    std::string lower_h = headers, lower_n = name;
    for (char& c : lower_h) c = char(std::tolower((unsigned char)c));
    for (char& c : lower_n) c = char(std::tolower((unsigned char)c));
    size_t at = lower_h.find("\r\n" + lower_n + ":");
    if (at == std::string::npos) return "";
    size_t start = at + 3 + name.size();
    size_t end = headers.find("\r\n", start);
    std::string v = headers.substr(start, end - start);
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    return v;
  }
};

// Sends `request` as is to 127.0.0.1:`port` and reads until the server closes.
inline HttpResponse raw_http(int port, const std::string& request, int timeout_ms = 5000) {
  HttpResponse r;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r;
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return r;
  }
  r.connected = true;
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close on an oversized request
    sent += size_t(n);
  }
  std::string raw;
  char buf[8192];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  size_t end = raw.find("\r\n\r\n");
  r.headers = raw.substr(0, end);
  if (end != std::string::npos) r.body = raw.substr(end + 4);
  if (raw.compare(0, 5, "HTTP/") == 0) {
    size_t sp = raw.find(' ');
    if (sp != std::string::npos) r.status = std::atoi(raw.c_str() + sp + 1);
  }
  return r;
}

inline HttpResponse http_get(int port, const std::string& path) {
  return raw_http(port, "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
}

// A port that was free a moment ago (bind to port 0, read it, close).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace wg::telemetry::testing
