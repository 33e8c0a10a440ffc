// Rank 0's telemetry for the whole job: fills the Prometheus families of
// monitoring/METRICS.md (telemetry/families) from the windows the
// coordinator gathers, with job-level aggregates (total throughput, slowest
// and fastest rank, largest memory peak and where); owns the registry, the
// /metrics endpoint, the file_sd target file and the final push to a
// Pushgateway. Telemetry never stops training: a failure (port in use,
// unwritable file_sd directory, Pushgateway down or silent) is one warning
// and a count in wgtrain_telemetry_failures_total.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/plan/piece_key.h"
#include "wg/telemetry/families.h"
#include "wg/telemetry/file_sd.h"
#include "wg/telemetry/metrics_endpoint.h"
#include "wg/telemetry/rank_window.h"

namespace wg {

struct RunIdentity {
  std::string run_id;
  std::string slurm_job_id;  // "" outside Slurm
  std::string config;        // the config files, comma separated
  std::string version;
  int ranks = 1;
};

class JobTelemetry {
 public:
  // `plan_pieces`: the recomputation plan's pieces, in the order of
  // RankWindow::recomputed; `streams`: the stream names, in the order of
  // RankWindow::stream_loss.
  JobTelemetry(const TelemetryConfig& config, const RunIdentity& run, std::vector<PieceKey> plan_pieces,
               std::vector<std::string> streams = {});
  ~JobTelemetry();

  // Starts the endpoint and writes the file_sd target (when configured).
  void start();
  void on_windows(const std::vector<RankWindow>& windows);
  // The run continues from a training checkpoint, its `resumes`-th resume
  // since it started (wgtrain_restarts_total: counted over the run's
  // processes, not this one's).
  void on_resume(int64_t resumes);
  // Removes the file_sd target, pushes the outcome (when configured), stops
  // the endpoint; once (a later call does nothing). status: completed |
  // failed | stopped; last_step: the steps the run finished.
  void finish(const std::string& status, int64_t last_step);

  int port() const { return endpoint_ ? endpoint_->port() : 0; }
  // The text exposition of the job's families (without the endpoint's own
  // exposer_* families): what run_dir/metrics.prom holds.
  std::string exposition() const { return telemetry::exposition(*registry_); }

 private:
  void failure(const std::string& kind, const std::string& what);

  TelemetryConfig config_;
  RunIdentity run_;
  std::vector<PieceKey> plan_pieces_;
  std::vector<std::string> streams_;
  // Shared: the endpoint collects from it through a weak reference.
  std::shared_ptr<prometheus::Registry> registry_;
  telemetry::JobFamilies families_;  // registered in registry_, which owns them
  prometheus::Gauge* memory_peak_max_ = nullptr;  // the one child of families_.job_memory_peak_max
  std::unique_ptr<telemetry::MetricsEndpoint> endpoint_;
  std::unique_ptr<telemetry::FileSdTarget> file_sd_;
  int64_t last_step_ = 0;
  bool finished_ = false;
};

}  // namespace wg
