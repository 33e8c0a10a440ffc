// Tests of the Prometheus client: exact exposition text, validation, value
// formatting, thread safety, and promtool's verdict on every family the
// trainer registers (monitoring/METRICS.md).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "wg/telemetry/metrics.h"

using namespace wg::telemetry;

namespace {

// Runs `promtool check metrics` with `text` on stdin; returns (exit code, output).
std::pair<int, std::string> promtool_check(const std::string& text) {
  char path[] = "/tmp/wg_promtool_XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) return {-1, "mkstemp failed"};
  if (::write(fd, text.data(), text.size()) != ssize_t(text.size())) return {-1, "write failed"};
  ::close(fd);
  std::string cmd = std::string("/usr/bin/promtool check metrics < ") + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = ::pclose(p);
  ::unlink(path);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool have_promtool() { return ::access("/usr/bin/promtool", X_OK) == 0; }

// Every family of monitoring/METRICS.md, with samples for two ranks.
void register_trainer_families(Registry& r) {
  const std::vector<double> step_buckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  r.gauge("wgtrain_run_info", "Run identity; always 1.")
      .with({{"run_id", "r1"}, {"slurm_job_id", ""}, {"config", "config/default_config.yml"}, {"version", "0.1.0"}})
      .set(1);
  r.gauge("wgtrain_ranks", "Number of ranks in the job.").with().set(2);
  r.gauge("wgtrain_last_step_timestamp_seconds", "Unix time of the last finished step of the job.").with().set(1.7e9);
  r.gauge("wgtrain_step", "Last finished step index + 1 of the job.").with().set(120);
  r.gauge("wgtrain_learning_rate", "Current learning rate.").with().set(3e-4);
  r.gauge("wgtrain_job_samples_per_second", "Samples per second summed over ranks.").with().set(55.5);
  r.gauge("wgtrain_job_tokens_per_second", "Tokens per second summed over ranks.").with().set(1.2e6);
  r.gauge("wgtrain_slowest_rank", "Rank with the lowest samples/s in the last window.").with().set(1);
  r.gauge("wgtrain_fastest_rank", "Rank with the highest samples/s in the last window.").with().set(0);
  r.counter("wgtrain_restarts_total", "Times this run was resumed from a checkpoint.").with().inc();
  auto& fails = r.counter("wgtrain_telemetry_failures_total", "Telemetry failures (training goes on).");
  for (const char* kind : {"file_sd", "pushgateway", "http"}) fails.with({{"kind", kind}});
  fails.with({{"kind", "http"}}).inc();

  auto& steps = r.counter("wgtrain_steps_total", "Training steps finished by the rank.");
  auto& loss = r.gauge("wgtrain_loss", "Last loss of the rank.");
  auto& sps = r.gauge("wgtrain_samples_per_second", "Rank throughput over the last metrics window.");
  auto& tps = r.gauge("wgtrain_tokens_per_second", "Rank tokens per second over the last metrics window.");
  auto& dur = r.histogram("wgtrain_step_duration_seconds", "Step durations of the rank.", step_buckets);
  auto& wait = r.gauge("wgtrain_data_wait_seconds", "Mean time per step waiting for data in the last window.");
  auto& peak = r.gauge("wgtrain_memory_peak_allocated_bytes", "Allocator peak in the last window.");
  auto& reserved = r.gauge("wgtrain_memory_peak_reserved_bytes", "Reserved peak in the last window.");
  auto& cap = r.gauge("wgtrain_device_memory_capacity_bytes", "Device memory (CPU: physical memory).");
  auto& nonfinite = r.counter("wgtrain_nonfinite_losses_total", "Non-finite losses seen.");
  auto& skipped = r.counter("wgtrain_skipped_steps_total", "Steps skipped (nan_policy skip).");
  auto& oom = r.counter("wgtrain_oom_retries_total", "Step attempts repeated after running out of memory.");
  auto& recomputed = r.gauge("wgtrain_checkpoint_recomputed", "1 if the piece is recomputed in backward, else 0.");
  auto& pieces = r.gauge("wgtrain_checkpoint_pieces_recomputed", "Number of recomputed pieces of the section.");
  auto& planned = r.gauge("wgtrain_planned_peak_bytes", "The automatic planner's predicted step peak (0: manual).");
  for (int rank = 0; rank < 2; ++rank) {
    Labels l = {{"rank", std::to_string(rank)}, {"node", "node-a"}, {"local_rank", std::to_string(rank)},
                {"device", rank == 0 ? "cuda:0" : "cpu"}};
    steps.with(l).add(120);
    loss.with(l).set(rank == 0 ? 0.731 : std::numeric_limits<double>::quiet_NaN());
    sps.with(l).set(27.75);
    tps.with(l).set(6e5);
    for (double s : {0.004, 0.2, 0.2, 3.0, 45.0}) dur.with(l).observe(s);
    wait.with(l).set(0.0125);
    peak.with(l).set(8.5e9);
    reserved.with(l).set(9e9);
    cap.with(l).set(1.4e11);
    nonfinite.with(l).add(rank);
    skipped.with(l).add(rank);
    oom.with(l);
    Labels rn = {{"rank", std::to_string(rank)}, {"node", "node-a"}};
    for (const char* section : {"embed.ERA5", "latent", "pred"}) {
      Labels ls = rn;
      ls["section"] = section;
      pieces.with(ls).set(1);
      ls["piece"] = "block0.attn";
      recomputed.with(ls).set(1);
      ls["piece"] = "block0.mlp";
      recomputed.with(ls).set(0);
    }
    planned.with(rn).set(rank == 0 ? 7.9e10 : 0);
  }
  r.gauge("wgtrain_job_memory_peak_max_bytes", "The largest memory peak of the last window, where it is.")
      .with({{"node", "node-a"}, {"rank", "0"}})
      .set(8.5e9);
  // Pushed to the Pushgateway at the end.
  r.gauge("wgtrain_job_end_timestamp_seconds", "Unix time the job ended.").with().set(1.7e9 + 3600);
  r.gauge("wgtrain_job_status", "1 for the job's final status.").with({{"status", "completed"}}).set(1);
  r.gauge("wgtrain_job_last_step", "Last step the job finished.").with().set(120);
}

}  // namespace

TEST(TelemetryMetrics, ExactExpositionText) {
  Registry r;
  auto& c = r.counter("wg_test_requests_total", "Requests handled.");
  c.with({{"code", "200"}}).inc();
  c.with({{"code", "200"}}).add(2);
  c.with({{"code", "500"}}).add(-1);  // ignored: a counter never goes down
  c.with({{"code", "500"}}).add(std::nan(""));
  auto& g = r.gauge("wg_test_temperature_celsius", "A gauge with \\ and \n in help.");
  g.with({{"rank", "0"}, {"path", "a\\b\"c\nd"}}).set(2.5);
  auto& h = r.histogram("wg_test_duration_seconds", "Durations.", {0.25, 1, 10});
  for (double v : {0.125, 0.25, 0.5, 20.0}) h.with().observe(v);

  const std::string expected =
      "# HELP wg_test_requests_total Requests handled.\n"
      "# TYPE wg_test_requests_total counter\n"
      "wg_test_requests_total{code=\"200\"} 3\n"
      "wg_test_requests_total{code=\"500\"} 0\n"
      "# HELP wg_test_temperature_celsius A gauge with \\\\ and \\n in help.\n"
      "# TYPE wg_test_temperature_celsius gauge\n"
      "wg_test_temperature_celsius{path=\"a\\\\b\\\"c\\nd\",rank=\"0\"} 2.5\n"
      "# HELP wg_test_duration_seconds Durations.\n"
      "# TYPE wg_test_duration_seconds histogram\n"
      "wg_test_duration_seconds_bucket{le=\"0.25\"} 2\n"
      "wg_test_duration_seconds_bucket{le=\"1\"} 3\n"
      "wg_test_duration_seconds_bucket{le=\"10\"} 3\n"
      "wg_test_duration_seconds_bucket{le=\"+Inf\"} 4\n"
      "wg_test_duration_seconds_sum 20.875\n"
      "wg_test_duration_seconds_count 4\n";
  EXPECT_EQ(r.serialize(), expected);
}

TEST(TelemetryMetrics, HistogramLabelsComeBeforeLe) {
  Registry r;
  auto& h = r.histogram("wg_test_h_seconds", "H.", {1});
  h.with({{"rank", "1"}}).observe(0.5);
  const std::string text = r.serialize();
  EXPECT_NE(text.find("wg_test_h_seconds_bucket{rank=\"1\",le=\"1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("wg_test_h_seconds_bucket{rank=\"1\",le=\"+Inf\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("wg_test_h_seconds_sum{rank=\"1\"} 0.5\n"), std::string::npos) << text;
  EXPECT_THROW(h.with({{"le", "x"}}), std::invalid_argument);
}

TEST(TelemetryMetrics, RejectsInvalidNamesAndCountersWithoutTotal) {
  Registry r;
  EXPECT_THROW(r.counter("wg_requests", "no _total"), std::invalid_argument);
  EXPECT_THROW(r.counter("1bad_total", "starts with a digit"), std::invalid_argument);
  EXPECT_THROW(r.gauge("bad-name", "dash"), std::invalid_argument);
  EXPECT_THROW(r.gauge("", "empty"), std::invalid_argument);
  EXPECT_THROW(r.gauge("wg_things_total", "a gauge may not take the counter suffix"), std::invalid_argument);
  EXPECT_THROW(r.histogram("wg_h_seconds", "unsorted", {1, 0.5}), std::invalid_argument);
  EXPECT_THROW(r.histogram("wg_h_seconds", "inf", {1, INFINITY}), std::invalid_argument);
  EXPECT_NO_THROW(r.gauge("ns:wg_ok_name_2", "colons are allowed in metric names"));

  auto& g = r.gauge("wg_g", "G.");
  EXPECT_THROW(g.with({{"bad-label", "x"}}), std::invalid_argument);
  EXPECT_THROW(g.with({{"__reserved", "x"}}), std::invalid_argument);
  EXPECT_THROW(g.with({{"0digit", "x"}}), std::invalid_argument);
  EXPECT_THROW(r.counter("wg_g_total", "ok name") .with({{"a:b", "x"}}), std::invalid_argument);

  // Same name and type: the same family; another type: rejected.
  EXPECT_EQ(&r.gauge("wg_g", "G."), &g);
  EXPECT_THROW(r.histogram("wg_g", "G.", {1}), std::invalid_argument);
  // Sample names of a histogram clash with a gauge called like its _sum.
  r.histogram("wg_lat_seconds", "L.", {1});
  EXPECT_THROW(r.gauge("wg_lat_seconds_sum", "clash"), std::invalid_argument);
  EXPECT_THROW(r.histogram("wg_lat_seconds", "L.", {2}), std::invalid_argument);
}

TEST(TelemetryMetrics, ValuesSpelledAsPrometheusWants) {
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  EXPECT_EQ(format_value(INFINITY), "+Inf");
  EXPECT_EQ(format_value(-INFINITY), "-Inf");
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(-3), "-3");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(1e6), "1000000");
  for (double v : {1.0 / 3, 3e-4, 1.7e9 + 0.123, 8.5e20, 5e-324, 1.7976931348623157e308})
    EXPECT_EQ(std::strtod(format_value(v).c_str(), nullptr), v) << format_value(v);
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

TEST(TelemetryMetrics, StableReferencesAndRemove) {
  Registry r;
  auto& g = r.gauge("wg_loss", "Loss.");
  Gauge& a = g.with({{"rank", "0"}});
  for (int i = 0; i < 100; ++i) g.with({{"rank", std::to_string(i + 1)}});
  EXPECT_EQ(&g.with({{"rank", "0"}}), &a);
  a.set(1);
  a.inc(2);
  a.dec(0.5);
  EXPECT_DOUBLE_EQ(a.value(), 2.5);
  EXPECT_EQ(g.size(), 101u);
  EXPECT_TRUE(g.remove({{"rank", "7"}}));
  EXPECT_FALSE(g.remove({{"rank", "7"}}));
  EXPECT_EQ(r.serialize().find("rank=\"7\""), std::string::npos);
  g.clear();
  EXPECT_EQ(g.size(), 0u);
  EXPECT_EQ(r.serialize(), "# HELP wg_loss Loss.\n# TYPE wg_loss gauge\n");
}

TEST(TelemetryMetrics, ConcurrentUpdatesAndScrapes) {
  Registry r;
  auto& c = r.counter("wg_events_total", "Events.");
  auto& h = r.histogram("wg_lat_seconds", "Latency.", {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) {
        c.with({{"thread", std::to_string(t % 2)}}).inc();
        h.with().observe(i % 2 ? 0.25 : 1.0);
      }
    });
  threads.emplace_back([&] {
    for (int i = 0; i < 200; ++i) EXPECT_FALSE(r.serialize().empty());
  });
  for (auto& t : threads) t.join();
  EXPECT_DOUBLE_EQ(c.with({{"thread", "0"}}).value() + c.with({{"thread", "1"}}).value(), 20000);
  Histogram::Snapshot s = h.with().snapshot();
  EXPECT_EQ(s.count, 20000u);
  EXPECT_EQ(s.cumulative.front(), 10000u);
  EXPECT_EQ(s.cumulative.back(), 20000u);
}

TEST(TelemetryMetrics, TrainerFamiliesPassPromtool) {
  if (!have_promtool()) GTEST_SKIP() << "/usr/bin/promtool not installed";
  Registry r;
  register_trainer_families(r);
  const std::string text = r.serialize();
  auto [rc, out] = promtool_check(text);
  EXPECT_EQ(rc, 0) << out << "\n---\n" << text;
  EXPECT_EQ(out, "") << text;
  // Every family is in the text, with HELP and TYPE.
  for (const char* name : {"wgtrain_run_info", "wgtrain_steps_total", "wgtrain_step_duration_seconds",
                           "wgtrain_checkpoint_recomputed", "wgtrain_telemetry_failures_total",
                           "wgtrain_job_status"}) {
    EXPECT_NE(text.find(std::string("# HELP ") + name + " "), std::string::npos) << name;
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  }
}

TEST(TelemetryMetrics, PromtoolCheckCanFail) {
  // The check above would see a problem: promtool reports this one.
  if (!have_promtool()) GTEST_SKIP() << "/usr/bin/promtool not installed";
  auto [rc, out] = promtool_check("# HELP wg_requests R.\n# TYPE wg_requests counter\nwg_requests 1\n");
  EXPECT_TRUE(rc != 0 || !out.empty()) << "promtool accepted a counter without _total";
}
