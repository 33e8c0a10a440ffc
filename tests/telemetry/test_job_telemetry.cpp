// Tests of rank 0's JobTelemetry without a trainer: rank windows become the
// documented series (the reserved peak where METRICS.md says so, non-finite
// losses apart from skipped steps), the endpoint serves them, and telemetry
// failures (a taken port, an unreachable or silent Pushgateway) are counted,
// bounded in time and never thrown.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "http_client.h"
#include "promtool.h"
#include "wg/telemetry/job_telemetry.h"

using wg::telemetry::testing::http_get;
using wg::telemetry::testing::RefusingPort;
using wg::telemetry::testing::SilentListener;
using Clock = std::chrono::steady_clock;

namespace {

wg::RankWindow window(int rank, int64_t step, int64_t allocated, int64_t reserved) {
  wg::RankWindow w;
  w.rank = rank;
  w.local_rank = rank;
  w.step = step;
  w.peak_allocated_bytes = allocated;
  w.peak_reserved_bytes = reserved;
  w.capacity_bytes = int64_t(1) << 34;
  w.loss = 0.5;
  w.lr = 1e-4;
  w.samples_per_second = 10 + rank;
  w.num_durations = 2;
  w.durations[0] = 0.2;
  w.durations[1] = 0.3;
  std::strncpy(w.host, "node-a", sizeof w.host - 1);
  std::strncpy(w.device, "cpu", sizeof w.device - 1);
  return w;
}

std::string rank_series(const std::string& name, int rank) {
  return name + "{device=\"cpu\",local_rank=\"" + std::to_string(rank) + "\",node=\"node-a\",rank=\"" +
         std::to_string(rank) + "\"} ";
}

bool has_line(const std::string& text, const std::string& line) { return text.find("\n" + line + "\n") != std::string::npos; }

wg::TelemetryConfig local_config() {
  wg::TelemetryConfig c;
  c.address = "127.0.0.1";
  return c;
}

}  // namespace

TEST(TelemetryJob, WindowsBecomeTheDocumentedSeries) {
  wg::JobTelemetry t(local_config(), wg::RunIdentity{"r1", "", "tiny.yml", "0.1.0", 2}, {});
  t.start();
  ASSERT_GT(t.port(), 0);
  // Rank 1 allocates more, rank 0 reserves more: the job's peak is the reserve.
  auto w0 = window(0, 10, 100, 300), w1 = window(1, 10, 200, 250);
  w1.nonfinite_total = 2;  // rank 1's loss was non-finite twice...
  w0.skipped_total = w1.skipped_total = 2;  // ...and both ranks skipped those steps
  w0.model_flops_per_second = 3e9, w1.model_flops_per_second = 1e9;
  w0.peak_flops = 1.5e10;  // rank 1's peak unknown: no MFU series
  // Rank 0 works 0.5 s a step, rank 1 0.25 s and waits 0.25 s for rank 0:
  // the same samples/s, rank 0 the one the job waits for.
  w0.busy_seconds = 0.5, w1.busy_seconds = 0.25, w1.sync_wait_seconds = 0.25;
  w0.samples_per_second = w1.samples_per_second = 4;
  w0.window_seconds = 5.0, w1.window_seconds = 4.5;  // the job's window: its slowest rank's
  t.on_windows({w0, w1});
  std::string text = t.exposition();
  EXPECT_NE(text.find(rank_series("wgtrain_busy_seconds", 0) + "0.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_sync_wait_seconds", 1) + "0.25\n"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, "wgtrain_slowest_rank 0")) << text;
  EXPECT_TRUE(has_line(text, "wgtrain_fastest_rank 1")) << text;
  EXPECT_TRUE(has_line(text, "wgtrain_metrics_window_seconds 5")) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_model_flops_per_second", 1) + "1000000000\n"), std::string::npos) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_mfu", 0) + "0.2\n"), std::string::npos) << text;
  EXPECT_EQ(text.find(rank_series("wgtrain_mfu", 1)), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, "wgtrain_job_model_flops_per_second 4000000000")) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_memory_peak_reserved_bytes", 0) + "300\n"), std::string::npos) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_memory_peak_allocated_bytes", 1) + "200\n"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, "wgtrain_job_memory_peak_max_bytes{node=\"node-a\",rank=\"0\"} 300")) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_nonfinite_losses_total", 0) + "0\n"), std::string::npos) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_nonfinite_losses_total", 1) + "2\n"), std::string::npos) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_skipped_steps_total", 0) + "2\n"), std::string::npos) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_skipped_steps_total", 1) + "2\n"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, "wgtrain_restarts_total 0")) << text;
  EXPECT_TRUE(has_line(text, "wgtrain_step 10")) << text;

  // The next window: rank 1 holds the peak, one series moves there; totals never go down.
  auto v0 = window(0, 20, 100, 100), v1 = window(1, 20, 100, 400);
  v1.nonfinite_total = 1;  // a smaller total than exported: ignored
  t.on_windows({v0, v1});
  t.on_resume(3);  // the run's third resume: the total over its processes
  text = t.exposition();
  EXPECT_TRUE(has_line(text, "wgtrain_job_memory_peak_max_bytes{node=\"node-a\",rank=\"1\"} 400")) << text;
  EXPECT_EQ(text.find("wgtrain_job_memory_peak_max_bytes{node=\"node-a\",rank=\"0\"}"), std::string::npos) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_nonfinite_losses_total", 1) + "2\n"), std::string::npos) << text;
  EXPECT_NE(text.find(rank_series("wgtrain_steps_total", 1) + "20\n"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, "wgtrain_restarts_total 3")) << text;
  if (wg::telemetry::testing::have_promtool()) {
    auto [rc, out] = wg::telemetry::testing::promtool_check(text);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(out, "") << text;
  }
  // The endpoint serves the same series, and the Exposer's own.
  auto resp = http_get(t.port(), "/metrics");
  ASSERT_EQ(resp.status, 200);
  EXPECT_NE(resp.body.find("wgtrain_job_memory_peak_max_bytes{node=\"node-a\",rank=\"1\"} 400\n"), std::string::npos);
  EXPECT_NE(resp.body.find("exposer_scrapes_total"), std::string::npos);
  // A third window with the peak on the same rank: the same series, its value updated.
  t.on_windows({window(0, 30, 100, 100), window(1, 30, 100, 450)});
  text = t.exposition();
  EXPECT_TRUE(has_line(text, "wgtrain_job_memory_peak_max_bytes{node=\"node-a\",rank=\"1\"} 450")) << text;
  const int port = t.port();
  t.finish("completed", 20);
  EXPECT_EQ(http_get(port, "/metrics").connected, false);  // stopped
}

// wgtrain_stream_loss: one series per rank and stream while the stream had
// data in the window; a window without data removes it (absent, not stale).
TEST(TelemetryJob, StreamLossSeriesFollowTheData) {
  wg::JobTelemetry t(local_config(), wg::RunIdentity{"r1", "", "tiny.yml", "0.1.0", 1}, {}, {"ERA5", "SYNOP"});
  auto w = window(0, 10, 100, 100);
  w.num_streams = 2;
  w.stream_loss[0] = 0.25;
  w.stream_loss[1] = 0.75;
  t.on_windows({w});
  std::string text = t.exposition();
  const std::string era5 = "wgtrain_stream_loss{device=\"cpu\",local_rank=\"0\",node=\"node-a\",rank=\"0\",stream=\"ERA5\"} ";
  const std::string synop = "wgtrain_stream_loss{device=\"cpu\",local_rank=\"0\",node=\"node-a\",rank=\"0\",stream=\"SYNOP\"} ";
  EXPECT_NE(text.find(era5 + "0.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find(synop + "0.75\n"), std::string::npos) << text;
  w.step = 20;
  w.stream_loss[1] = std::nan("");  // SYNOP had no observation in this window
  t.on_windows({w});
  text = t.exposition();
  EXPECT_NE(text.find(era5 + "0.25\n"), std::string::npos) << text;
  EXPECT_EQ(text.find(synop), std::string::npos) << text;
  w.step = 30;
  w.stream_loss[1] = 0.5;  // back
  t.on_windows({w});
  EXPECT_NE(t.exposition().find(synop + "0.5\n"), std::string::npos);
}

TEST(TelemetryJob, TakenPortAndUnreachablePushgatewayAreCountedNotThrown) {
  wg::JobTelemetry first(local_config(), wg::RunIdentity{"first", "", "tiny.yml", "0.1.0", 1}, {});
  first.start();
  ASSERT_GT(first.port(), 0);
  wg::TelemetryConfig c = local_config();
  c.port = first.port();
  const RefusingPort refusing;
  ASSERT_GT(refusing.port, 0);
  c.pushgateway = refusing.url();
  wg::JobTelemetry t(c, wg::RunIdentity{"busy", "", "tiny.yml", "0.1.0", 1}, {});
  EXPECT_NO_THROW(t.start());
  EXPECT_EQ(t.port(), 0);
  t.on_windows({window(0, 5, 10, 10)});
  const auto t0 = Clock::now();
  EXPECT_NO_THROW(t.finish("completed", 5));
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500));
  const std::string text = t.exposition();
  // What the CLI test greps in metrics.prom.
  EXPECT_NE(text.find("wgtrain_telemetry_failures_total{kind=\"http\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("wgtrain_telemetry_failures_total{kind=\"pushgateway\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("wgtrain_telemetry_failures_total{kind=\"file_sd\"} 0\n"), std::string::npos) << text;
}

TEST(TelemetryJob, SilentPushgatewayCostsTheTimeoutAtMost) {
  SilentListener gw;
  ASSERT_GT(gw.port, 0);
  wg::TelemetryConfig c = local_config();
  c.pushgateway = "http://127.0.0.1:" + std::to_string(gw.port);
  wg::JobTelemetry t(c, wg::RunIdentity{"silent", "", "tiny.yml", "0.1.0", 1}, {});
  // Not started: finish() is then the push alone (stopping civetweb takes up to 2 s more).
  const auto t0 = Clock::now();
  t.finish("completed", 1);
  const auto took = Clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(1900));  // PushOptions::timeout_ms, 2000 by default
  EXPECT_LT(took, std::chrono::milliseconds(2000 + 5000));  // a silent gateway would otherwise hold it for ever
  EXPECT_NE(t.exposition().find("wgtrain_telemetry_failures_total{kind=\"pushgateway\"} 1\n"), std::string::npos);
}
