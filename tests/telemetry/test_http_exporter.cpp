// Tests of the /metrics HTTP endpoint on 127.0.0.1: content, routing, bad and
// oversized requests, concurrent scrapes during updates, and a port clash.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "http_client.h"
#include "wg/telemetry/http_exporter.h"
#include "wg/telemetry/metrics.h"

using namespace wg::telemetry;
using wg::telemetry::testing::http_get;
using wg::telemetry::testing::raw_http;

namespace {

std::unique_ptr<HttpExporter> start_or_fail(Registry& r) {
  std::string error;
  auto ex = HttpExporter::start(r, "127.0.0.1", 0, &error);
  EXPECT_NE(ex, nullptr) << error;
  return ex;
}

}  // namespace

TEST(TelemetryHttp, ServesMetricsOnAnOsPickedPort) {
  Registry r;
  r.gauge("wg_test_loss", "Loss.").with({{"rank", "0"}}).set(0.5);
  auto ex = start_or_fail(r);
  ASSERT_TRUE(ex);
  EXPECT_GT(ex->port(), 0);
  auto resp = http_get(ex->port(), "/metrics");
  ASSERT_TRUE(resp.connected);
  EXPECT_EQ(resp.headers.substr(0, 15), "HTTP/1.1 200 OK") << resp.headers;
  EXPECT_EQ(resp.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8") << resp.headers;
  EXPECT_EQ(resp.body, r.serialize());
  EXPECT_NE(resp.body.find("wg_test_loss{rank=\"0\"} 0.5\n"), std::string::npos);
  EXPECT_EQ(resp.header("Content-Length"), std::to_string(resp.body.size()));
  // A query string is still /metrics.
  EXPECT_EQ(http_get(ex->port(), "/metrics?x=1").status, 200);
  EXPECT_EQ(ex->scrapes(), 2u);
}

TEST(TelemetryHttp, OtherPathsAre404AndOtherMethods405) {
  Registry r;
  auto ex = start_or_fail(r);
  ASSERT_TRUE(ex);
  EXPECT_EQ(http_get(ex->port(), "/").status, 404);
  EXPECT_EQ(http_get(ex->port(), "/metricsx").status, 404);
  EXPECT_EQ(http_get(ex->port(), "/metrics/").status, 404);
  EXPECT_EQ(http_get(ex->port(), "/../etc/passwd").status, 404);
  auto post = raw_http(ex->port(), "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.header("Allow"), "GET");
  EXPECT_EQ(raw_http(ex->port(), "DELETE /metrics HTTP/1.0\r\n\r\n").status, 405);
  EXPECT_EQ(ex->scrapes(), 0u);
}

TEST(TelemetryHttp, SurvivesMalformedAndOversizedRequests) {
  Registry r;
  r.counter("wg_test_events_total", "Events.").with().inc();
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
}

TEST(TelemetryHttp, ConcurrentScrapesWhileMetricsUpdate) {
  Registry r;
  auto& steps = r.counter("wgtrain_steps_total", "Steps.");
  auto& dur = r.histogram("wgtrain_step_duration_seconds", "Durations.", {0.1, 1});
  auto ex = start_or_fail(r);
  ASSERT_TRUE(ex);
  const int port = ex->port();
  std::atomic<bool> done{false};
  std::thread updater([&] {
    for (int i = 0; i < 2000000 && !done.load(); ++i) {
      std::string rank = std::to_string(i % 4);
      steps.with({{"rank", rank}}).inc();
      dur.with({{"rank", rank}}).observe((i % 10) * 0.2);
      if (i % 1000 == 999) r.gauge("wgtrain_step", "Step.").with().set(i);
    }
  });
  std::atomic<int> ok{0};
  std::vector<std::thread> scrapers;
  for (int t = 0; t < 8; ++t)
    scrapers.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto resp = http_get(port, "/metrics");
        if (resp.status == 200 && resp.body.find("# TYPE wgtrain_steps_total counter\n") != std::string::npos &&
            resp.header("Content-Length") == std::to_string(resp.body.size()))
          ok.fetch_add(1);
      }
    });
  for (auto& t : scrapers) t.join();
  done = true;
  updater.join();
  EXPECT_EQ(ok.load(), 200);
  EXPECT_EQ(ex->scrapes(), 200u);
}

TEST(TelemetryHttp, SecondExporterOnTheSamePortFailsCleanly) {
  Registry r;
  r.gauge("wg_test_up", "Up.").with().set(1);
  auto first = start_or_fail(r);
  ASSERT_TRUE(first);
  std::string error;
  std::unique_ptr<HttpExporter> second;
  EXPECT_NO_THROW(second = HttpExporter::start(r, "127.0.0.1", first->port(), &error));
  EXPECT_EQ(second, nullptr);
  EXPECT_NE(error.find(std::to_string(first->port())), std::string::npos) << error;
  EXPECT_NE(error.find("cannot listen"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_EQ(http_get(first->port(), "/metrics").status, 200);
}

TEST(TelemetryHttp, BadAddressOrPortFailsCleanly) {
  Registry r;
  for (auto [addr, port] : std::vector<std::pair<std::string, int>>{
           {"300.1.1.1", 0}, {"not an address", 0}, {"127.0.0.1", 70000}, {"127.0.0.1", -1}}) {
    std::string error;
    std::unique_ptr<HttpExporter> ex;
    EXPECT_NO_THROW(ex = HttpExporter::start(r, addr, port, &error));
    EXPECT_EQ(ex, nullptr) << addr << ":" << port;
    EXPECT_FALSE(error.empty());
  }
  // Still fine afterwards, and a stopped exporter frees its port.
  int port = 0;
  {
    auto ex = start_or_fail(r);
    ASSERT_TRUE(ex);
    port = ex->port();
  }
  std::string error;
  auto again = HttpExporter::start(r, "127.0.0.1", port, &error);
  EXPECT_NE(again, nullptr) << error;
}
