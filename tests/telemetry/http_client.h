// Test helpers for the telemetry suites: a plain-socket HTTP client (one
// request per connection, bounded by socket timeouts), clients that never
// finish their request, a listener that never answers, and a free-port
// finder.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace wg::telemetry::testing {

// A TCP socket bound to a free port on 127.0.0.1 while it lives (port 0
// when none could be bound), listening or not.
struct LoopbackSocket {
  int fd = -1;
  int port = 0;
  explicit LoopbackSocket(bool listening) : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        (!listening || ::listen(fd, 4) == 0) && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
  }
  ~LoopbackSocket() {
    if (fd >= 0) ::close(fd);
  }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

// A TCP listener on 127.0.0.1 that accepts into its backlog and never answers
// (an unresponsive Pushgateway).
struct SilentListener : LoopbackSocket {
  SilentListener() : LoopbackSocket(/*listening=*/true) {}
};

// A port that refuses connections while this lives: bound, so no other
// test can take it, but not listening, so a connect is refused at once
// (a port from free_port() could be taken by a server in between).
struct RefusingPort : LoopbackSocket {
  RefusingPort() : LoopbackSocket(/*listening=*/false) {}
};

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

// `n` connections to 127.0.0.1:`port` that each send a request line and a
// header, and never the blank line that ends the headers. Closed on
// destruction.
class HalfOpenClients {
 public:
  HalfOpenClients(int port, int n) {
    const std::string partial = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (int i = 0; i < n; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(uint16_t(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
          ::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL) != ssize_t(partial.size())) {
        ::close(fd);
        continue;
      }
      fds_.push_back(fd);
    }
  }
  ~HalfOpenClients() {
    for (int fd : fds_) ::close(fd);
  }
  HalfOpenClients(const HalfOpenClients&) = delete;
  HalfOpenClients& operator=(const HalfOpenClients&) = delete;

  int connected() const { return int(fds_.size()); }

  // Waits until the server has closed every connection, or `timeout_ms`.
  // Per connection: the HTTP status it answered before closing, 0 if it
  // closed without an answer, -1 if it was still open at the deadline.
  std::vector<int> wait_for_close(int timeout_ms) {
    std::vector<int> status(fds_.size(), -1);
    std::vector<std::string> got(fds_.size());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      std::vector<pollfd> p;
      std::vector<size_t> which;
      for (size_t i = 0; i < fds_.size(); ++i)
        if (status[i] == -1) {
          p.push_back({fds_[i], POLLIN, 0});
          which.push_back(i);
        }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (p.empty() || left <= 0) break;
      if (::poll(p.data(), p.size(), int(left)) <= 0) continue;
      for (size_t k = 0; k < p.size(); ++k) {
        if (!p[k].revents) continue;
        const size_t i = which[k];
        char buf[1024];
        ssize_t n = ::recv(fds_[i], buf, sizeof buf, 0);
        if (n > 0) {
          got[i].append(buf, size_t(n));
          continue;
        }
        status[i] = got[i].compare(0, 5, "HTTP/") == 0 ? std::atoi(got[i].c_str() + got[i].find(' ') + 1) : 0;
      }
    }
    return status;
  }

 private:
  std::vector<int> fds_;
};

// Whether process `pid` holds a TCP socket listening on `port` (any
// address): so that a server this test started, not another test's that
// took the port in between, is the one answering there (Linux: the
// listening sockets' inodes in /proc/net/tcp{,6} against the process's
// open files).
inline bool listens_on(pid_t pid, int port) {
  std::vector<std::string> sockets;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string slot, local, remote, state, skip, inode;
      row >> slot >> local >> remote >> state;
      for (int i = 0; i < 5; ++i) row >> skip;  // tx:rx queue, timer, retransmits, uid, timeout
      row >> inode;
      const size_t colon = local.rfind(':');
      if (state == "0A" && colon != std::string::npos && std::stoi(local.substr(colon + 1), nullptr, 16) == port)
        sockets.push_back("socket:[" + inode + "]");  // 0A: LISTEN
    }
  }
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = ::opendir(fds.c_str());
  if (dir == nullptr) return false;
  bool found = false;
  while (const dirent* e = ::readdir(dir)) {
    char target[256];
    const ssize_t n = ::readlink((fds + "/" + e->d_name).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    for (const std::string& s : sockets) found = found || s == target;
  }
  ::closedir(dir);
  return found;
}

// A port that was free a moment ago (bound to port 0, read, closed).
inline int free_port() {
  const LoopbackSocket bound(/*listening=*/false);
  return bound.port > 0 ? bound.port : -1;
}

}  // namespace wg::telemetry::testing
