// The Prometheus families of monitoring/METRICS.md: every name, help text,
// type and bucket layout, registered in one place in a prometheus-cpp
// Registry; and the text exposition of a registry. prometheus-cpp owns the
// values, the children and the text format; this file owns what we export.
// No LibTorch.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>
#include <vector>

namespace wg::telemetry {

template <typename T>
using Family = prometheus::Family<T>;
using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

// Registering a family. prometheus-cpp checks the name, the label names and
// a clash with another type (std::invalid_argument); these add what it lets
// through: a counter must end in "_total" and nothing else may (promtool
// flags both), and the help text is escaped as the text format requires
// (prometheus-cpp writes it verbatim, so a newline would break the format).
Family<Counter>& counter_family(prometheus::Registry& r, const std::string& name, const std::string& help);
Family<Gauge>& gauge_family(prometheus::Registry& r, const std::string& name, const std::string& help);
Family<Histogram>& histogram_family(prometheus::Registry& r, const std::string& name, const std::string& help);

// HELP text escaping of the text format: backslash and newline.
std::string escape_help(const std::string& help);

// Text exposition format 0.0.4 of what `c` collects (prometheus-cpp's
// TextSerializer: counters, then gauges, then histograms, each in
// registration order; a family without children is left out).
std::string exposition(const prometheus::Collectable& c);

// Upper bounds of wgtrain_step_duration_seconds (+Inf is implicit).
const prometheus::Histogram::BucketBoundaries& step_duration_buckets();

// Rank 0's families, served on /metrics and written to metrics.prom.
struct JobFamilies {
  explicit JobFamilies(prometheus::Registry& r);

  // The run
  Family<Gauge>& run_info;
  Family<Gauge>& ranks;
  Family<Counter>& restarts;
  Family<Counter>& telemetry_failures;
  // Per rank (rank, node, local_rank, device)
  Family<Counter>& steps;
  Family<Gauge>& loss;
  Family<Gauge>& stream_loss;
  Family<Gauge>& samples_per_second;
  Family<Gauge>& tokens_per_second;
  Family<Gauge>& model_flops_per_second;
  Family<Gauge>& peak_flops;
  Family<Gauge>& mfu;
  Family<Histogram>& step_duration;
  Family<Gauge>& data_wait_seconds;
  Family<Gauge>& data_wait_ratio;
  Family<Gauge>& sync_wait_seconds;
  Family<Gauge>& busy_seconds;
  Family<Gauge>& memory_peak_allocated;
  Family<Gauge>& memory_peak_reserved;
  Family<Gauge>& memory_capacity;
  Family<Counter>& nonfinite_losses;
  Family<Counter>& skipped_steps;
  Family<Counter>& oom_retries;
  Family<Counter>& data_skipped_samples;
  // Per rank (rank, node), and per checkpoint piece or section
  Family<Gauge>& planned_peak;
  Family<Gauge>& checkpoint_recomputed;
  Family<Gauge>& checkpoint_pieces_recomputed;
  // The job
  Family<Gauge>& job_samples_per_second;
  Family<Gauge>& job_tokens_per_second;
  Family<Gauge>& job_model_flops_per_second;
  Family<Gauge>& last_step_timestamp;
  Family<Gauge>& metrics_window_seconds;
  Family<Gauge>& step;
  Family<Gauge>& learning_rate;
  Family<Gauge>& validation_loss;
  Family<Gauge>& slowest_rank;
  Family<Gauge>& fastest_rank;
  Family<Gauge>& job_memory_peak_max;
};

// The job outcome, pushed once to a Pushgateway at the end.
struct OutcomeFamilies {
  explicit OutcomeFamilies(prometheus::Registry& r);

  Family<Gauge>& end_timestamp;
  Family<Gauge>& status;
  Family<Gauge>& last_step;
};

}  // namespace wg::telemetry
