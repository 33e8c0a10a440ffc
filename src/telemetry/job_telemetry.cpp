// Rank 0's job telemetry (see header). Metric names and meanings:
// monitoring/METRICS.md.
#include "wg/telemetry/job_telemetry.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "wg/telemetry/pushgateway.h"

namespace wg {

namespace {
using telemetry::Labels;

const std::vector<double> kStepBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

Labels rank_labels(const RankWindow& w) {
  return {{"rank", std::to_string(w.rank)},
          {"node", w.hostname()},
          {"local_rank", std::to_string(w.local_rank)},
          {"device", w.device_name()}};
}

// Counters mirror totals the ranks count themselves.
void set_total(telemetry::Counter& c, double total) {
  if (total > c.value()) c.add(total - c.value());
}

std::string advertised_host(const std::string& address) {
  if (!address.empty() && address != "0.0.0.0" && address != "::") return address;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}
}  // namespace

JobTelemetry::JobTelemetry(const TelemetryConfig& config, const RunIdentity& run, std::vector<PieceKey> plan_pieces)
    : config_(config), run_(run), plan_pieces_(std::move(plan_pieces)) {
  registry_.gauge("wgtrain_run_info", "Identity of the run (value 1).")
      .with({{"run_id", run.run_id}, {"slurm_job_id", run.slurm_job_id}, {"config", run.config}, {"version", run.version}})
      .set(1);
  registry_.gauge("wgtrain_ranks", "Number of ranks in the job.").with().set(run.ranks);
  restarts_ = &registry_.counter("wgtrain_restarts_total", "Times this run was resumed from a checkpoint.").with();
  failures_ = &registry_.counter("wgtrain_telemetry_failures_total", "Telemetry failures; training goes on.");
  for (const char* kind : {"file_sd", "pushgateway", "http"}) failures_->with({{"kind", kind}});
}

JobTelemetry::~JobTelemetry() {
  if (file_sd_) file_sd_->remove(nullptr);
}

void JobTelemetry::failure(const std::string& kind, const std::string& what) {
  failures_->with({{"kind", kind}}).inc();
  spdlog::warn("telemetry ({}): {}; training goes on", kind, what);
}

void JobTelemetry::start() {
  std::string error;
  exporter_ = telemetry::HttpExporter::start(registry_, config_.address, config_.port, &error);
  if (!exporter_) {
    failure("http", "cannot serve /metrics on " + config_.address + ":" + std::to_string(config_.port) + ": " + error);
    return;
  }
  const std::string target = advertised_host(config_.address) + ":" + std::to_string(exporter_->port());
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
  auto& r = registry_;
  double job_samples = 0, job_tokens = 0, last_unix = 0;
  const RankWindow* slow = nullptr;
  const RankWindow* fast = nullptr;
  const RankWindow* biggest = nullptr;
  for (const RankWindow& w : windows) {
    const Labels l = rank_labels(w);
    set_total(r.counter("wgtrain_steps_total", "Training steps finished by the rank.").with(l), double(w.step));
    r.gauge("wgtrain_loss", "Last loss of the rank.").with(l).set(w.loss);
    r.gauge("wgtrain_samples_per_second", "Rank throughput over the last metrics window.").with(l).set(w.samples_per_second);
    r.gauge("wgtrain_tokens_per_second", "Rank token throughput over the last metrics window.").with(l).set(w.tokens_per_second);
    auto& hist = r.histogram("wgtrain_step_duration_seconds", "Step durations, data included.", kStepBuckets).with(l);
    for (int i = 0; i < w.num_durations; ++i) hist.observe(w.durations[i]);
    r.gauge("wgtrain_data_wait_seconds", "Mean time per step spent waiting for the batch, last window.").with(l)
        .set(w.data_wait_seconds);
    r.gauge("wgtrain_data_wait_ratio", "Share of step time spent waiting for the batch, last window.").with(l)
        .set(w.data_wait_ratio);
    r.gauge("wgtrain_memory_peak_allocated_bytes", "Allocator peak in the last window.").with(l).set(double(w.peak_allocated_bytes));
    r.gauge("wgtrain_memory_peak_reserved_bytes", "Reserved peak in the last window (CPU: = allocated).").with(l)
        .set(double(w.peak_reserved_bytes));
    r.gauge("wgtrain_device_memory_capacity_bytes", "Device memory (CPU: physical memory).").with(l).set(double(w.capacity_bytes));
    set_total(r.counter("wgtrain_nonfinite_losses_total", "Non-finite losses seen by the rank.").with(l), double(w.nonfinite_total));
    set_total(r.counter("wgtrain_skipped_steps_total", "Steps skipped (nan_policy skip).").with(l), double(w.skipped_total));
    set_total(r.counter("wgtrain_oom_retries_total", "Step attempts repeated after running out of memory.").with(l),
              double(w.oom_retries_total));
    set_total(r.counter("wgtrain_data_skipped_samples_total", "Samples replaced because their data was unreadable.")
                  .with(l),
              double(w.skipped_samples_total));
    const Labels rn = {{"rank", std::to_string(w.rank)}, {"node", w.hostname()}};
    r.gauge("wgtrain_planned_peak_bytes", "The automatic planner's predicted step peak (0: manual plan).").with(rn)
        .set(double(w.planned_peak_bytes));
    std::map<std::string, int> per_section;
    for (int i = 0; i < w.num_pieces && size_t(i) < plan_pieces_.size(); ++i) {
      const std::string section = plan_pieces_[size_t(i)].section_label(), piece = plan_pieces_[size_t(i)].piece_label();
      r.gauge("wgtrain_checkpoint_recomputed", "1 if the piece is recomputed in backward on the rank.")
          .with({{"rank", std::to_string(w.rank)}, {"node", w.hostname()}, {"section", section}, {"piece", piece}})
          .set(w.recomputed[i]);
      per_section[section] += w.recomputed[i];
    }
    for (const auto& [section, n] : per_section)
      r.gauge("wgtrain_checkpoint_pieces_recomputed", "Recomputed pieces of the section on the rank.")
          .with({{"rank", std::to_string(w.rank)}, {"node", w.hostname()}, {"section", section}})
          .set(n);
    job_samples += w.samples_per_second;
    job_tokens += w.tokens_per_second;
    last_unix = std::max(last_unix, w.last_step_unix_seconds);
    if (!slow || w.samples_per_second < slow->samples_per_second) slow = &w;
    if (!fast || w.samples_per_second > fast->samples_per_second) fast = &w;
    if (!biggest || w.peak_reserved_bytes > biggest->peak_reserved_bytes) biggest = &w;
    last_step_ = std::max(last_step_, w.step);
  }
  if (windows.empty()) return;
  r.gauge("wgtrain_job_samples_per_second", "Samples per second, all ranks.").with().set(job_samples);
  r.gauge("wgtrain_job_tokens_per_second", "Tokens per second, all ranks.").with().set(job_tokens);
  r.gauge("wgtrain_last_step_timestamp_seconds", "Unix time of the last finished step.").with().set(last_unix);
  r.gauge("wgtrain_step", "Steps finished by the job.").with().set(double(last_step_));
  r.gauge("wgtrain_learning_rate", "Current learning rate.").with().set(windows.front().lr);
  if (windows.front().validation_loss >= 0)  // samples_per_validation > 0, after the first mini-epoch
    r.gauge("wgtrain_validation_loss", "Loss on the validation set after the latest mini-epoch (all ranks).")
        .with()
        .set(windows.front().validation_loss);
  r.gauge("wgtrain_slowest_rank", "Rank with the lowest samples/s in the last window.").with().set(slow->rank);
  r.gauge("wgtrain_fastest_rank", "Rank with the highest samples/s in the last window.").with().set(fast->rank);
  auto& peak = r.gauge("wgtrain_job_memory_peak_max_bytes", "The largest memory peak of the last window, and where.");
  peak.clear();
  peak.with({{"node", biggest->hostname()}, {"rank", std::to_string(biggest->rank)}}).set(double(biggest->peak_reserved_bytes));
}

void JobTelemetry::on_resume() {
  restarts_->inc();
}

void JobTelemetry::finish(const std::string& status, int64_t last_step) {
  std::string error;
  if (file_sd_ && !file_sd_->remove(&error)) failure("file_sd", error);
  file_sd_.reset();
  if (!config_.pushgateway.empty()) {
    telemetry::Registry outcome;
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    outcome.gauge("wgtrain_job_end_timestamp_seconds", "Unix time the job ended.").with().set(now);
    outcome.gauge("wgtrain_job_status", "How the job ended (value 1).").with({{"status", status}}).set(1);
    outcome.gauge("wgtrain_job_last_step", "Steps the job finished.").with().set(double(last_step));
    if (!telemetry::push_to_gateway(config_.pushgateway, "wgtrain", run_.run_id, outcome.serialize(), &error))
      failure("pushgateway", "push to " + config_.pushgateway + " failed: " + error);
    else
      spdlog::info("job outcome ({}) pushed to {}", status, config_.pushgateway);
  }
  exporter_.reset();
}

}  // namespace wg
