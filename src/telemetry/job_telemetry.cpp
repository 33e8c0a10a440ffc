// Rank 0's job telemetry (see header): the windows into the families, the
// endpoint, file_sd and the final push. Metric names and meanings:
// monitoring/METRICS.md.
#include "wg/telemetry/job_telemetry.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <map>

#include "wg/telemetry/push.h"

namespace wg {

namespace {
using telemetry::Labels;

Labels rank_labels(const RankWindow& w) {
  return {{"rank", std::to_string(w.rank)},
          {"node", w.hostname()},
          {"local_rank", std::to_string(w.local_rank)},
          {"device", w.device_name()}};
}

// Counters mirror totals the ranks count themselves.
void set_total(prometheus::Counter& c, double total) {
  if (total > c.Value()) c.Increment(total - c.Value());
}

std::string advertised_host(const std::string& address) {
  if (!address.empty() && address != "0.0.0.0" && address != "::") return address;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}
}  // namespace

JobTelemetry::JobTelemetry(const TelemetryConfig& config, const RunIdentity& run, std::vector<PieceKey> plan_pieces,
                           std::vector<std::string> streams)
    : config_(config),
      run_(run),
      plan_pieces_(std::move(plan_pieces)),
      streams_(std::move(streams)),
      registry_(std::make_shared<prometheus::Registry>()),
      families_(*registry_) {
  families_.run_info
      .Add({{"run_id", run.run_id}, {"slurm_job_id", run.slurm_job_id}, {"config", run.config}, {"version", run.version}})
      .Set(1);
  families_.ranks.Add({}).Set(run.ranks);
  families_.restarts.Add({});  // 0 until on_resume()
  for (const char* kind : {"file_sd", "pushgateway", "http"}) families_.telemetry_failures.Add({{"kind", kind}});
}

JobTelemetry::~JobTelemetry() {
  if (file_sd_) file_sd_->remove(nullptr);
}

void JobTelemetry::failure(const std::string& kind, const std::string& what) {
  families_.telemetry_failures.Add({{"kind", kind}}).Increment();
  spdlog::warn("telemetry ({}): {}; training goes on", kind, what);
}

void JobTelemetry::start() {
  std::string error;
  endpoint_ = telemetry::MetricsEndpoint::start(registry_, config_.address, config_.port, &error);
  if (!endpoint_) {
    failure("http", "cannot serve /metrics on " + config_.address + ":" + std::to_string(config_.port) + ": " + error);
    return;
  }
  const std::string target = advertised_host(config_.address) + ":" + std::to_string(endpoint_->port());
  spdlog::info("metrics at http://{}/metrics", target);
  if (config_.file_sd_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(config_.file_sd_dir, ec);  // a failure shows in the write below
  file_sd_ = std::make_unique<telemetry::FileSdTarget>(
      (std::filesystem::path(config_.file_sd_dir) / ("wgtrain-" + run_.run_id + ".json")).string());
  if (!file_sd_->write({target}, {{"run_id", run_.run_id}, {"slurm_job_id", run_.slurm_job_id}, {"config", run_.config}},
                       &error)) {
    failure("file_sd", error);
    file_sd_.reset();
  } else {
    spdlog::info("Prometheus file_sd target written to {}", file_sd_->path());
  }
}

void JobTelemetry::on_windows(const std::vector<RankWindow>& windows) {
  auto& f = families_;
  double job_samples = 0, job_tokens = 0, job_flops = 0, last_unix = 0, window_seconds = 0;
  const RankWindow* slow = nullptr;
  const RankWindow* fast = nullptr;
  const RankWindow* biggest = nullptr;
  for (const RankWindow& w : windows) {
    const Labels l = rank_labels(w);
    set_total(f.steps.Add(l), double(w.step));
    f.loss.Add(l).Set(w.loss);
    for (int i = 0; i < w.num_streams && size_t(i) < streams_.size(); ++i) {
      Labels ls = l;
      ls["stream"] = streams_[size_t(i)];
      if (std::isfinite(w.stream_loss[i]))
        f.stream_loss.Add(ls).Set(w.stream_loss[i]);
      else if (f.stream_loss.Has(ls))  // no data for the stream in this window: the series is absent
        f.stream_loss.Remove(&f.stream_loss.Add(ls));
    }
    f.samples_per_second.Add(l).Set(w.samples_per_second);
    f.tokens_per_second.Add(l).Set(w.tokens_per_second);
    f.model_flops_per_second.Add(l).Set(w.model_flops_per_second);
    if (w.peak_flops > 0) {  // unknown peak: no MFU series
      f.peak_flops.Add(l).Set(w.peak_flops);
      f.mfu.Add(l).Set(w.model_flops_per_second / w.peak_flops);
    }
    auto& hist = f.step_duration.Add(l, telemetry::step_duration_buckets());
    for (int i = 0; i < w.num_durations; ++i) hist.Observe(w.durations[i]);
    f.data_wait_seconds.Add(l).Set(w.data_wait_seconds);
    f.data_wait_ratio.Add(l).Set(w.data_wait_ratio);
    f.sync_wait_seconds.Add(l).Set(w.sync_wait_seconds);
    f.busy_seconds.Add(l).Set(w.busy_seconds);
    f.memory_peak_allocated.Add(l).Set(double(w.peak_allocated_bytes));
    f.memory_peak_reserved.Add(l).Set(double(w.peak_reserved_bytes));
    f.memory_capacity.Add(l).Set(double(w.capacity_bytes));
    set_total(f.nonfinite_losses.Add(l), double(w.nonfinite_total));
    set_total(f.skipped_steps.Add(l), double(w.skipped_total));
    set_total(f.oom_retries.Add(l), double(w.oom_retries_total));
    set_total(f.data_skipped_samples.Add(l), double(w.skipped_samples_total));
    const Labels rn = {{"rank", std::to_string(w.rank)}, {"node", w.hostname()}};
    f.planned_peak.Add(rn).Set(double(w.planned_peak_bytes));
    std::map<std::string, int> per_section;
    for (int i = 0; i < w.num_pieces && size_t(i) < plan_pieces_.size(); ++i) {
      const std::string section = plan_pieces_[size_t(i)].section_label(), piece = plan_pieces_[size_t(i)].piece_label();
      f.checkpoint_recomputed
          .Add({{"rank", std::to_string(w.rank)}, {"node", w.hostname()}, {"section", section}, {"piece", piece}})
          .Set(w.recomputed[i]);
      per_section[section] += w.recomputed[i];
    }
    for (const auto& [section, n] : per_section)
      f.checkpoint_pieces_recomputed.Add({{"rank", std::to_string(w.rank)}, {"node", w.hostname()}, {"section", section}})
          .Set(n);
    job_samples += w.samples_per_second;
    job_tokens += w.tokens_per_second;
    job_flops += w.model_flops_per_second;
    last_unix = std::max(last_unix, w.last_step_unix_seconds);
    window_seconds = std::max(window_seconds, w.window_seconds);
    // Synchronous steps: every rank's samples/s is the slowest's; the one the
    // others wait for has the most time of its own.
    if (!slow || w.busy_seconds > slow->busy_seconds) slow = &w;
    if (!fast || w.busy_seconds < fast->busy_seconds) fast = &w;
    if (!biggest || w.peak_reserved_bytes > biggest->peak_reserved_bytes) biggest = &w;
    last_step_ = std::max(last_step_, w.step);
  }
  if (windows.empty()) return;
  f.job_samples_per_second.Add({}).Set(job_samples);
  f.job_tokens_per_second.Add({}).Set(job_tokens);
  f.job_model_flops_per_second.Add({}).Set(job_flops);
  f.last_step_timestamp.Add({}).Set(last_unix);
  f.metrics_window_seconds.Add({}).Set(window_seconds);
  f.step.Add({}).Set(double(last_step_));
  f.learning_rate.Add({}).Set(windows.front().lr);
  if (windows.front().validation_loss >= 0)  // samples_per_validation > 0, after the first mini-epoch
    f.validation_loss.Add({}).Set(windows.front().validation_loss);
  f.slowest_rank.Add({}).Set(slow->rank);
  f.fastest_rank.Add({}).Set(fast->rank);
  // One series: the largest reserved peak, labelled with where it is. The
  // new one is set before the old one goes (Add gives the old one back when
  // the labels are the same), so no scrape finds the family empty.
  prometheus::Gauge& now =
      f.job_memory_peak_max.Add({{"node", biggest->hostname()}, {"rank", std::to_string(biggest->rank)}});
  now.Set(double(biggest->peak_reserved_bytes));
  if (memory_peak_max_ && memory_peak_max_ != &now) f.job_memory_peak_max.Remove(memory_peak_max_);
  memory_peak_max_ = &now;
}

void JobTelemetry::on_resume(int64_t resumes) { set_total(families_.restarts.Add({}), double(resumes)); }

void JobTelemetry::finish(const std::string& status, int64_t last_step) {
  if (finished_) return;
  finished_ = true;
  std::string error;
  if (file_sd_ && !file_sd_->remove(&error)) failure("file_sd", error);
  file_sd_.reset();
  if (!config_.pushgateway.empty()) {
    auto outcome = std::make_shared<prometheus::Registry>();
    telemetry::OutcomeFamilies o(*outcome);
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    o.end_timestamp.Add({}).Set(now);
    o.status.Add({{"status", status}}).Set(1);
    o.last_step.Add({}).Set(double(last_step));
    // Bounded (PushOptions::timeout_ms): a silent Pushgateway costs the job at most that long.
    if (!telemetry::push_to_gateway(config_.pushgateway, "wgtrain", run_.run_id, outcome, &error))
      failure("pushgateway", "push to " + config_.pushgateway + " failed: " + error);
    else
      spdlog::info("job outcome ({}) pushed to {}", status, config_.pushgateway);
  }
  endpoint_.reset();
}

}  // namespace wg
