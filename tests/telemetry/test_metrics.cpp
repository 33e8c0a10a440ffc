// Tests of the Prometheus families and their text (prometheus-cpp's Registry
// and TextSerializer behind telemetry/families): exact exposition text,
// what is validated where, value spelling, thread safety, and promtool's
// verdict on every family of monitoring/METRICS.md as the trainer registers it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "promtool.h"
#include "wg/telemetry/families.h"

using namespace wg::telemetry;
using prometheus::Labels;
using wg::telemetry::testing::have_promtool;
using wg::telemetry::testing::promtool_check;

namespace {

// Every family of monitoring/METRICS.md as JobFamilies and OutcomeFamilies
// register it, with samples for two ranks.
void fill_trainer_families(JobFamilies& f, OutcomeFamilies& o) {
  f.run_info.Add({{"run_id", "r1"}, {"slurm_job_id", ""}, {"config", "config/default_config.yml"}, {"version", "0.1.0"}})
      .Set(1);
  f.ranks.Add({}).Set(2);
  f.last_step_timestamp.Add({}).Set(1.7e9);
  f.metrics_window_seconds.Add({}).Set(12.5);
  f.step.Add({}).Set(120);
  f.learning_rate.Add({}).Set(3e-4);
  f.validation_loss.Add({}).Set(0.52);
  f.job_samples_per_second.Add({}).Set(55.5);
  f.job_tokens_per_second.Add({}).Set(1.2e6);
  f.job_model_flops_per_second.Add({}).Set(2.4e14);
  f.slowest_rank.Add({}).Set(1);
  f.fastest_rank.Add({}).Set(0);
  f.restarts.Add({}).Increment();
  for (const char* kind : {"file_sd", "pushgateway", "http"}) f.telemetry_failures.Add({{"kind", kind}});
  f.telemetry_failures.Add({{"kind", "http"}}).Increment();
  for (int rank = 0; rank < 2; ++rank) {
    Labels l = {{"rank", std::to_string(rank)}, {"node", "node-a"}, {"local_rank", std::to_string(rank)},
                {"device", rank == 0 ? "cuda:0" : "cpu"}};
    f.steps.Add(l).Increment(120);
    f.loss.Add(l).Set(rank == 0 ? 0.731 : std::numeric_limits<double>::quiet_NaN());
    f.samples_per_second.Add(l).Set(27.75);
    f.tokens_per_second.Add(l).Set(6e5);
    f.model_flops_per_second.Add(l).Set(1.2e14);
    f.peak_flops.Add(l).Set(989.4e12);
    f.mfu.Add(l).Set(1.2e14 / 989.4e12);
    for (double s : {0.004, 0.2, 0.2, 3.0, 45.0}) f.step_duration.Add(l, step_duration_buckets()).Observe(s);
    f.data_wait_seconds.Add(l).Set(0.0125);
    f.data_wait_ratio.Add(l).Set(0.05);
    f.sync_wait_seconds.Add(l).Set(rank == 0 ? 0.1 : 0.0);
    f.busy_seconds.Add(l).Set(rank == 0 ? 0.15 : 0.25);
    f.memory_peak_allocated.Add(l).Set(8.5e9);
    f.memory_peak_reserved.Add(l).Set(9e9);
    f.memory_capacity.Add(l).Set(1.4e11);
    f.nonfinite_losses.Add(l).Increment(rank);
    f.skipped_steps.Add(l).Increment(rank);
    f.oom_retries.Add(l);
    f.data_skipped_samples.Add(l);
    for (const char* stream : {"ERA5", "SYNOP"}) {
      Labels ls = l;
      ls["stream"] = stream;
      f.stream_loss.Add(ls).Set(0.25);
    }
    Labels rn = {{"rank", std::to_string(rank)}, {"node", "node-a"}};
    for (const char* section : {"embed.ERA5", "ae_global", "pred.ERA5"}) {
      Labels ls = rn;
      ls["section"] = section;
      f.checkpoint_pieces_recomputed.Add(ls).Set(1);
      ls["piece"] = "block0.attn";
      f.checkpoint_recomputed.Add(ls).Set(1);
      ls["piece"] = "block0.mlp";
      f.checkpoint_recomputed.Add(ls).Set(0);
    }
    f.planned_peak.Add(rn).Set(rank == 0 ? 7.9e10 : 0);
  }
  f.job_memory_peak_max.Add({{"node", "node-a"}, {"rank", "0"}}).Set(9e9);
  o.end_timestamp.Add({}).Set(1.7e9 + 3600);
  o.status.Add({{"status", "completed"}}).Set(1);
  o.last_step.Add({}).Set(120);
}

// The wgtrain_* names monitoring/METRICS.md documents (without _bucket).
std::set<std::string> documented_families() {
  std::ifstream in(std::string(WG_SOURCE_DIR) + "/monitoring/METRICS.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::set<std::string> names;
  const std::regex name("wgtrain_[a-z_]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator(); ++it)
    if (!std::regex_search(it->str(), std::regex("_bucket$"))) names.insert(it->str());
  return names;
}

std::string gauge_text(double v) {
  prometheus::Registry r;
  gauge_family(r, "wg_test_value", "V.").Add({}).Set(v);
  const std::string text = exposition(r);
  const std::string prefix = "# HELP wg_test_value V.\n# TYPE wg_test_value gauge\nwg_test_value ";
  return text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size(), text.size() - prefix.size() - 1)
                                                     : "unexpected: " + text;
}

}  // namespace

TEST(TelemetryMetrics, ExactExpositionText) {
  // One child per family: prometheus-cpp orders children by hash.
  prometheus::Registry r;
  auto& c = counter_family(r, "wg_test_requests_total", "Requests handled.");
  c.Add({{"code", "200"}}).Increment();
  c.Add({{"code", "200"}}).Increment(2);
  c.Add({{"code", "200"}}).Increment(-1);  // ignored: a counter never goes down
  auto& g = gauge_family(r, "wg_test_temperature_celsius", "A gauge with \\ and \n in help.");
  g.Add({{"rank", "0"}, {"path", "a\\b\"c\nd"}}).Set(2.5);
  auto& h = histogram_family(r, "wg_test_duration_seconds", "Durations.");
  for (double v : {0.125, 0.25, 0.5, 20.0}) h.Add({}, prometheus::Histogram::BucketBoundaries{0.25, 1, 10}).Observe(v);

  const std::string expected =
      "# HELP wg_test_requests_total Requests handled.\n"
      "# TYPE wg_test_requests_total counter\n"
      "wg_test_requests_total{code=\"200\"} 3\n"
      "# HELP wg_test_temperature_celsius A gauge with \\\\ and \\n in help.\n"
      "# TYPE wg_test_temperature_celsius gauge\n"
      "wg_test_temperature_celsius{path=\"a\\\\b\\\"c\\nd\",rank=\"0\"} 2.5\n"
      "# HELP wg_test_duration_seconds Durations.\n"
      "# TYPE wg_test_duration_seconds histogram\n"
      "wg_test_duration_seconds_count 4\n"
      "wg_test_duration_seconds_sum 20.875\n"
      "wg_test_duration_seconds_bucket{le=\"0.25\"} 2\n"
      "wg_test_duration_seconds_bucket{le=\"1\"} 3\n"
      "wg_test_duration_seconds_bucket{le=\"10\"} 3\n"
      "wg_test_duration_seconds_bucket{le=\"+Inf\"} 4\n";
  EXPECT_EQ(exposition(r), expected);
  if (have_promtool()) {
    auto [rc, out] = promtool_check(expected);
    EXPECT_EQ(rc, 0) << out;
  }
}

TEST(TelemetryMetrics, HistogramLabelsComeBeforeLe) {
  prometheus::Registry r;
  auto& h = histogram_family(r, "wg_test_h_seconds", "H.");
  h.Add({{"rank", "1"}}, prometheus::Histogram::BucketBoundaries{1}).Observe(0.5);
  const std::string text = exposition(r);
  EXPECT_NE(text.find("wg_test_h_seconds_bucket{rank=\"1\",le=\"1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("wg_test_h_seconds_bucket{rank=\"1\",le=\"+Inf\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("wg_test_h_seconds_sum{rank=\"1\"} 0.5\n"), std::string::npos) << text;
  // prometheus-cpp accepts a label "le" on a histogram (our families have
  // none); the text it makes is one promtool rejects.
  prometheus::Registry bad;
  histogram_family(bad, "wg_test_le_seconds", "L.").Add({{"le", "x"}}, prometheus::Histogram::BucketBoundaries{1});
  if (have_promtool()) EXPECT_NE(promtool_check(exposition(bad)).first, 0) << exposition(bad);
}

TEST(TelemetryMetrics, RejectsInvalidNamesAndCountersWithoutTotal) {
  prometheus::Registry r;
  EXPECT_THROW(counter_family(r, "wg_requests", "no _total"), std::invalid_argument);           // ours
  EXPECT_THROW(counter_family(r, "1bad_total", "starts with a digit"), std::invalid_argument);  // prometheus-cpp
  EXPECT_THROW(gauge_family(r, "bad-name", "dash"), std::invalid_argument);
  EXPECT_THROW(gauge_family(r, "", "empty"), std::invalid_argument);
  EXPECT_THROW(gauge_family(r, "wg_things_total", "a gauge may not take the counter suffix"), std::invalid_argument);
  EXPECT_THROW(histogram_family(r, "wg_things_total", "nor a histogram"), std::invalid_argument);
  EXPECT_THROW(histogram_family(r, "wg_h_seconds", "unsorted").Add({}, prometheus::Histogram::BucketBoundaries{1, 0.5}),
               std::invalid_argument);
  EXPECT_NO_THROW(gauge_family(r, "ns:wg_ok_name_2", "colons are allowed in metric names"));
  // Our only buckets: finite (+Inf is implicit; prometheus-cpp would repeat it) and increasing.
  const auto& b = step_duration_buckets();
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_TRUE(std::isfinite(b[i]));
    if (i > 0) EXPECT_GT(b[i], b[i - 1]);
  }

  auto& g = gauge_family(r, "wg_g", "G.");
  EXPECT_THROW(g.Add({{"bad-label", "x"}}), std::invalid_argument);
  EXPECT_THROW(g.Add({{"__reserved", "x"}}), std::invalid_argument);
  EXPECT_THROW(g.Add({{"0digit", "x"}}), std::invalid_argument);
  EXPECT_THROW(counter_family(r, "wg_g_total", "ok name").Add({{"a:b", "x"}}), std::invalid_argument);

  // Same name and type: the same family; another type: rejected.
  EXPECT_EQ(&gauge_family(r, "wg_g", "G."), &g);
  EXPECT_THROW(histogram_family(r, "wg_g", "G."), std::invalid_argument);
  // A gauge named like a histogram's _sum: prometheus-cpp accepts it, promtool flags it.
  prometheus::Registry clash;
  histogram_family(clash, "wg_lat_seconds", "L.").Add({}, prometheus::Histogram::BucketBoundaries{1}).Observe(0.5);
  gauge_family(clash, "wg_lat_seconds_sum", "clash").Add({}).Set(1);
  if (have_promtool()) EXPECT_NE(promtool_check(exposition(clash)).first, 0) << exposition(clash);
}

TEST(TelemetryMetrics, ValuesSpelledAsPrometheusReadsThem) {
  EXPECT_EQ(gauge_text(std::nan("")), "Nan");  // prometheus-cpp's spelling; Go's ParseFloat reads it
  EXPECT_EQ(gauge_text(INFINITY), "+Inf");
  EXPECT_EQ(gauge_text(-INFINITY), "-Inf");
  EXPECT_EQ(gauge_text(0), "0");
  EXPECT_EQ(gauge_text(-3), "-3");
  EXPECT_EQ(gauge_text(0.1), "0.1");
  EXPECT_EQ(gauge_text(1e6), "1000000");
  EXPECT_EQ(gauge_text(1.4e11), "140000000000");  // bytes stay integers
  EXPECT_EQ(gauge_text(9007199254740992.0), "9007199254740992");
  // 16 significant digits: within one part in 1e15 (not always the exact double).
  for (double v : {1.0 / 3, 3e-4, 1.7e9 + 0.123, 8.5e20, 5e-324, 1e308}) {
    const double back = std::strtod(gauge_text(v).c_str(), nullptr);
    EXPECT_LE(std::fabs(back - v), std::fabs(v) * 1e-15) << gauge_text(v);
  }
  // The largest double is rounded up past itself (a reader overflows):
  // nothing we export comes near it.
  EXPECT_EQ(gauge_text(1.7976931348623157e308), "1.797693134862316e+308");
  if (have_promtool()) {
    auto [rc, out] = promtool_check("# HELP wg_test_value V.\n# TYPE wg_test_value gauge\nwg_test_value Nan\n");
    EXPECT_EQ(rc, 0) << out;
  }
}

TEST(TelemetryMetrics, StableReferencesAndRemove) {
  prometheus::Registry r;
  auto& g = gauge_family(r, "wg_loss", "Loss.");
  prometheus::Gauge& a = g.Add({{"rank", "0"}});
  for (int i = 0; i < 100; ++i) g.Add({{"rank", std::to_string(i + 1)}});
  EXPECT_EQ(&g.Add({{"rank", "0"}}), &a);
  a.Set(1);
  a.Increment(2);
  a.Decrement(0.5);
  EXPECT_DOUBLE_EQ(a.Value(), 2.5);
  EXPECT_TRUE(g.Has({{"rank", "7"}}));
  g.Remove(&g.Add({{"rank", "7"}}));
  EXPECT_FALSE(g.Has({{"rank", "7"}}));
  EXPECT_EQ(exposition(r).find("rank=\"7\""), std::string::npos);
  for (int i = 0; i <= 100; ++i)
    if (g.Has({{"rank", std::to_string(i)}})) g.Remove(&g.Add({{"rank", std::to_string(i)}}));
  EXPECT_EQ(exposition(r), "");  // a family without children is left out
}

TEST(TelemetryMetrics, ConcurrentUpdatesAndScrapes) {
  prometheus::Registry r;
  auto& c = counter_family(r, "wg_events_total", "Events.");
  auto& h = histogram_family(r, "wg_lat_seconds", "Latency.");
  const prometheus::Histogram::BucketBoundaries bounds = {0.5};
  // The children exist before any thread starts: a family without children is left out of the
  // text, so a scrape that ran before the first Add would otherwise see nothing.
  c.Add({{"thread", "0"}});
  h.Add({}, bounds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) {
        c.Add({{"thread", std::to_string(t % 2)}}).Increment();
        h.Add({}, bounds).Observe(i % 2 ? 0.25 : 1.0);
      }
    });
  threads.emplace_back([&] {
    for (int i = 0; i < 200; ++i) EXPECT_FALSE(exposition(r).empty());
  });
  for (auto& t : threads) t.join();
  EXPECT_DOUBLE_EQ(c.Add({{"thread", "0"}}).Value() + c.Add({{"thread", "1"}}).Value(), 20000);
  const prometheus::ClientMetric m = h.Add({}, bounds).Collect();
  EXPECT_EQ(m.histogram.sample_count, 20000u);
  EXPECT_EQ(m.histogram.bucket.front().cumulative_count, 10000u);
  EXPECT_EQ(m.histogram.bucket.back().cumulative_count, 20000u);
}

TEST(TelemetryMetrics, TrainerFamiliesPassPromtool) {
  if (!have_promtool()) GTEST_SKIP() << "/usr/bin/promtool not installed";
  prometheus::Registry r;
  JobFamilies f(r);
  OutcomeFamilies o(r);
  fill_trainer_families(f, o);
  const std::string text = exposition(r);
  auto [rc, out] = promtool_check(text);
  EXPECT_EQ(rc, 0) << out << "\n---\n" << text;
  EXPECT_EQ(out, "") << text;
  // Every documented family is registered, with HELP and TYPE.
  const std::set<std::string> names = documented_families();
  EXPECT_GE(names.size(), 30u);
  for (const std::string& name : names) {
    EXPECT_NE(text.find("# HELP " + name + " "), std::string::npos) << name;
    EXPECT_NE(text.find("# TYPE " + name + " "), std::string::npos) << name;
  }
}

TEST(TelemetryMetrics, PromtoolCheckCanFail) {
  // The check above would see a problem: promtool reports this one.
  if (!have_promtool()) GTEST_SKIP() << "/usr/bin/promtool not installed";
  auto [rc, out] = promtool_check("# HELP wg_requests R.\n# TYPE wg_requests counter\nwg_requests 1\n");
  EXPECT_TRUE(rc != 0 || !out.empty()) << "promtool accepted a counter without _total";
}
