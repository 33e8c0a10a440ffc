// Tests of the /metrics endpoint (telemetry/metrics_endpoint: prometheus-cpp's
// Exposer) on 127.0.0.1: content, routing, bad and oversized requests,
// concurrent scrapes during updates, clients that never finish their
// request, and a port clash.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http_client.h"
#include "promtool.h"
#include "wg/telemetry/families.h"
#include "wg/telemetry/metrics_endpoint.h"

using namespace wg::telemetry;
using wg::telemetry::testing::HalfOpenClients;
using wg::telemetry::testing::http_get;
using wg::telemetry::testing::raw_http;
using Clock = std::chrono::steady_clock;

namespace {

std::unique_ptr<MetricsEndpoint> start_or_fail(const std::shared_ptr<prometheus::Registry>& r,
                                               const EndpointOptions& options = {}) {
  std::string error;
  auto ex = MetricsEndpoint::start(r, "127.0.0.1", 0, &error, options);
  EXPECT_NE(ex, nullptr) << error;
  return ex;
}

// Milliseconds one GET /metrics takes; -1 if it is not a 200.
double scrape_ms(int port) {
  const auto t0 = Clock::now();
  const auto resp = http_get(port, "/metrics");
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return resp.status == 200 ? ms : -1;
}

// No status line, or a body shorter than the Content-Length it announced.
bool broken_transfer(const wg::telemetry::testing::HttpResponse& r) {
  if (r.status == 0) return true;
  const std::string length = r.header("Content-Length");
  return !length.empty() && r.body.size() < std::stoul(length);
}

}  // namespace

TEST(TelemetryHttp, ServesMetricsOnAnOsPickedPort) {
  auto r = std::make_shared<prometheus::Registry>();
  gauge_family(*r, "wg_test_loss", "Loss.").Add({{"rank", "0"}}).Set(0.5);
  auto ex = start_or_fail(r);
  ASSERT_TRUE(ex);
  EXPECT_GT(ex->port(), 0);
  auto resp = http_get(ex->port(), "/metrics");
  ASSERT_TRUE(resp.connected);
  EXPECT_EQ(resp.headers.substr(0, 15), "HTTP/1.1 200 OK") << resp.headers;
  // prometheus-cpp's Content-Type (no version=0.0.4: Prometheus reads it as the text format).
  EXPECT_EQ(resp.header("Content-Type"), "text/plain; charset=utf-8") << resp.headers;
  EXPECT_NE(resp.body.find(exposition(*r)), std::string::npos) << resp.body;
  EXPECT_NE(resp.body.find("wg_test_loss{rank=\"0\"} 0.5\n"), std::string::npos);
  EXPECT_NE(resp.body.find("# TYPE exposer_scrapes_total counter\n"), std::string::npos) << resp.body;
  EXPECT_EQ(resp.header("Content-Length"), std::to_string(resp.body.size()));
  if (wg::telemetry::testing::have_promtool()) {
    auto [rc, out] = wg::telemetry::testing::promtool_check(resp.body);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(out, "");
  }
  // A query string is still /metrics.
  EXPECT_EQ(http_get(ex->port(), "/metrics?x=1").status, 200);
  EXPECT_EQ(ex->scrapes(), 2u);
}

TEST(TelemetryHttp, OtherPathsAre404AndOtherMethods405) {
  auto r = std::make_shared<prometheus::Registry>();
  auto ex = start_or_fail(r);
  ASSERT_TRUE(ex);
  EXPECT_EQ(http_get(ex->port(), "/").status, 404);
  EXPECT_EQ(http_get(ex->port(), "/metricsx").status, 404);  // the Exposer alone would serve these three
  EXPECT_EQ(http_get(ex->port(), "/metrics/").status, 404);
  EXPECT_EQ(http_get(ex->port(), "/metrics/x").status, 404);
  EXPECT_EQ(http_get(ex->port(), "/../etc/passwd").status, 404);
  auto post = raw_http(ex->port(), "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.header("Allow"), "GET");
  auto del = raw_http(ex->port(), "DELETE /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(del.status, 405);
  EXPECT_EQ(del.header("Allow"), "GET");
  EXPECT_EQ(ex->scrapes(), 0u);
}

TEST(TelemetryHttp, SurvivesMalformedAndOversizedRequests) {
  auto r = std::make_shared<prometheus::Registry>();
  counter_family(*r, "wg_test_events_total", "Events.").Add({}).Increment();
  auto ex = start_or_fail(r);
  ASSERT_TRUE(ex);
  const int port = ex->port();
  for (const std::string& bad :
       {std::string("GARBAGE\r\n\r\n"), std::string("GET\r\n\r\n"), std::string("GET /metrics HTTP/9.9\r\n\r\n"),
        std::string("\x01\x02\xff\xfe\r\n\r\n", 8), std::string("GET /metrics HTTP/1.0\r\nNoColonHeader\r\n\r\n")}) {
    auto resp = raw_http(port, bad, 3000);
    EXPECT_NE(resp.status, 200) << "accepted: " << bad;
  }
  // 1 MiB of header: refused (or the connection dropped), never served.
  std::string big = "GET /metrics HTTP/1.0\r\nX-Big: " + std::string(1 << 20, 'a') + "\r\n\r\n";
  auto resp = raw_http(port, big, 5000);
  EXPECT_NE(resp.status, 200);
  // A client that connects and says nothing is dropped after the request timeout
  // without blocking others.
  std::thread silent([port] { raw_http(port, "", 5000); });
  auto ok = http_get(port, "/metrics");
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("wg_test_events_total 1\n"), std::string::npos) << ok.body;
  silent.join();
  EXPECT_EQ(http_get(port, "/metrics").status, 200);
  EXPECT_EQ(ex->scrapes(), 2u);
}

TEST(TelemetryHttp, ConcurrentScrapesWhileMetricsUpdate) {
  auto r = std::make_shared<prometheus::Registry>();
  auto& steps = counter_family(*r, "wgtrain_steps_total", "Steps.");
  auto& dur = histogram_family(*r, "wgtrain_step_duration_seconds", "Durations.");
  // A family without series is not exposed at all: give it one before any
  // scrape, or a scrape that runs before the updater's first step (a loaded
  // machine) rightly lacks it.
  steps.Add({{"rank", "0"}}).Increment();
  auto ex = start_or_fail(r);
  ASSERT_TRUE(ex);
  const int port = ex->port();
  std::atomic<bool> done{false};
  std::thread updater([&] {
    for (int i = 0; i < 2000000 && !done.load(); ++i) {
      std::string rank = std::to_string(i % 4);
      steps.Add({{"rank", rank}}).Increment();
      dur.Add({{"rank", rank}}, prometheus::Histogram::BucketBoundaries{0.1, 1}).Observe((i % 10) * 0.2);
      if (i % 1000 == 999) gauge_family(*r, "wgtrain_step", "Step.").Add({}).Set(i);
    }
  });
  std::atomic<int> ok{0}, retries{0};
  std::mutex bad_mutex;
  std::vector<std::string> bad;  // what each failed scrape got
  std::vector<std::thread> scrapers;
  for (int t = 0; t < 8; ++t)
    scrapers.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto resp = http_get(port, "/metrics");
        // A broken transfer (no status line, or a body cut short of its
        // Content-Length) is retried, as Prometheus retries a failed scrape:
        // a loaded machine can make civetweb drop a connection it could not
        // serve in its request timeout. A complete response with wrong
        // content is never retried.
        for (int retry = 0; broken_transfer(resp) && retry < 2; ++retry) {
          retries.fetch_add(1);
          resp = http_get(port, "/metrics");
        }
        if (resp.status == 200 && resp.body.find("# TYPE wgtrain_steps_total counter\n") != std::string::npos &&
            resp.header("Content-Length") == std::to_string(resp.body.size())) {
          ok.fetch_add(1);
        } else {
          std::lock_guard<std::mutex> lock(bad_mutex);
          bad.push_back("status " + std::to_string(resp.status) + ", Content-Length '" + resp.header("Content-Length") +
                        "', body " + std::to_string(resp.body.size()) + " bytes, headers: " + resp.headers);
        }
      }
    });
  for (auto& t : scrapers) t.join();
  done = true;
  updater.join();
  EXPECT_EQ(ok.load(), 200) << (bad.empty() ? std::string() : bad.front());
  // Every scrape, and every retried one that got as far as collecting, is counted.
  EXPECT_GE(ex->scrapes(), 200u);
  EXPECT_LE(ex->scrapes(), 200u + unsigned(retries.load()));
}

// Clients that send a request line and never finish their headers each hold
// a civetweb worker until the request timeout: with 64 of them a scrape is
// still answered within 1 s, and they are dropped later without harm.
TEST(TelemetryHttp, HalfOpenClientsDoNotBlindTheEndpoint) {
  auto r = std::make_shared<prometheus::Registry>();
  gauge_family(*r, "wg_test_up", "Up.").Add({}).Set(1);
  const EndpointOptions options;
  auto ex = start_or_fail(r, options);
  ASSERT_TRUE(ex);
  const int port = ex->port();
  for (int n : {0, 16, 64}) {
    HalfOpenClients clients(port, n);
    ASSERT_EQ(clients.connected(), n);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // every one of them in a worker
    const double ms = scrape_ms(port);
    std::cout << "scrape with " << n << " half-open clients: " << ms << " ms\n";
    EXPECT_GE(ms, 0) << n << " half-open clients: the scrape failed";
    EXPECT_LT(ms, 1000) << n << " half-open clients";
    if (n != 64) continue;
    // Dropped after the request timeout (civetweb checks its stop and time
    // every 2 s at most): end of stream or an error status, never a 200.
    const auto t0 = Clock::now();
    const std::vector<int> statuses = clients.wait_for_close(options.request_timeout_ms + 4000);
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    int closed = 0;
    for (int s : statuses) {
      EXPECT_NE(s, 200);
      if (s >= 0) ++closed;  // -1: still open at the deadline
    }
    std::cout << closed << " of " << n << " half-open clients dropped after " << waited + 0.2 << " s\n";
    EXPECT_EQ(closed, n);
  }
  EXPECT_EQ(http_get(port, "/metrics").status, 200);
  EXPECT_EQ(ex->scrapes(), 4u);
}

TEST(TelemetryHttp, SecondEndpointOnTheSamePortFailsCleanly) {
  auto r = std::make_shared<prometheus::Registry>();
  gauge_family(*r, "wg_test_up", "Up.").Add({}).Set(1);
  auto first = start_or_fail(r);
  ASSERT_TRUE(first);
  std::string error;
  std::unique_ptr<MetricsEndpoint> second;
  EXPECT_NO_THROW(second = MetricsEndpoint::start(r, "127.0.0.1", first->port(), &error));
  EXPECT_EQ(second, nullptr);
  EXPECT_NE(error.find(std::to_string(first->port())), std::string::npos) << error;
  EXPECT_NE(error.find("cannot listen"), std::string::npos) << error;
  EXPECT_NE(error.find("in use"), std::string::npos) << error;  // the reason, found by trying the port
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_EQ(http_get(first->port(), "/metrics").status, 200);
}

TEST(TelemetryHttp, BadAddressOrPortFailsCleanly) {
  auto r = std::make_shared<prometheus::Registry>();
  for (auto [addr, port] : std::vector<std::pair<std::string, int>>{
           {"300.1.1.1", 0}, {"not an address", 0}, {"127.0.0.1", 70000}, {"127.0.0.1", -1}}) {
    std::string error;
    std::unique_ptr<MetricsEndpoint> ex;
    EXPECT_NO_THROW(ex = MetricsEndpoint::start(r, addr, port, &error));
    EXPECT_EQ(ex, nullptr) << addr << ":" << port;
    EXPECT_FALSE(error.empty());
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  // Still fine afterwards, and a stopped endpoint frees its port.
  int port = 0;
  {
    auto ex = start_or_fail(r);
    ASSERT_TRUE(ex);
    port = ex->port();
  }
  std::string error;
  auto again = MetricsEndpoint::start(r, "127.0.0.1", port, &error);
  EXPECT_NE(again, nullptr) << error;
}
