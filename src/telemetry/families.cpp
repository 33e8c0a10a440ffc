// The families of monitoring/METRICS.md registered in a prometheus-cpp
// Registry, the checks prometheus-cpp leaves out, and the text exposition
// (see include/wg/telemetry/families.h).
#include "wg/telemetry/families.h"

#include <prometheus/text_serializer.h>

#include <stdexcept>

namespace wg::telemetry {

namespace {

bool ends_with_total(const std::string& s) {
  const std::string suffix = "_total";
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void check_not_total(const std::string& name, const char* type) {
  if (ends_with_total(name))
    throw std::invalid_argument(std::string(type) + " '" + name + "' must not end in _total (reserved for counters)");
}

}  // namespace

std::string escape_help(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

Family<Counter>& counter_family(prometheus::Registry& r, const std::string& name, const std::string& help) {
  if (!ends_with_total(name)) throw std::invalid_argument("counter '" + name + "' must end in _total");
  return prometheus::BuildCounter().Name(name).Help(escape_help(help)).Register(r);
}

Family<Gauge>& gauge_family(prometheus::Registry& r, const std::string& name, const std::string& help) {
  check_not_total(name, "gauge");
  return prometheus::BuildGauge().Name(name).Help(escape_help(help)).Register(r);
}

Family<Histogram>& histogram_family(prometheus::Registry& r, const std::string& name, const std::string& help) {
  check_not_total(name, "histogram");
  return prometheus::BuildHistogram().Name(name).Help(escape_help(help)).Register(r);
}

std::string exposition(const prometheus::Collectable& c) {
  return prometheus::TextSerializer().Serialize(c.Collect());
}

const prometheus::Histogram::BucketBoundaries& step_duration_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                  0.5,   1,    2.5,   5,    10,  30};
  return buckets;
}

JobFamilies::JobFamilies(prometheus::Registry& r)
    : run_info(gauge_family(r, "wgtrain_run_info", "Identity of the run (value 1).")),
      ranks(gauge_family(r, "wgtrain_ranks", "Number of ranks in the job.")),
      restarts(counter_family(r, "wgtrain_restarts_total", "Times this run was resumed from a checkpoint.")),
      telemetry_failures(
          counter_family(r, "wgtrain_telemetry_failures_total", "Telemetry failures; training goes on.")),
      steps(counter_family(r, "wgtrain_steps_total", "Training steps finished by the rank.")),
      loss(gauge_family(r, "wgtrain_loss", "Last loss of the rank.")),
      stream_loss(gauge_family(r, "wgtrain_stream_loss",
                               "Mean training loss of one stream over the rank's last metrics window (its first loss "
                               "function, mean over channels; absent while the stream had no data).")),
      samples_per_second(
          gauge_family(r, "wgtrain_samples_per_second", "Rank throughput over the last metrics window.")),
      tokens_per_second(
          gauge_family(r, "wgtrain_tokens_per_second", "Rank token throughput over the last metrics window.")),
      model_flops_per_second(gauge_family(
          r, "wgtrain_model_flops_per_second",
          "Model FLOPs (matrix products of forward, backward and recomputation, counted from the shapes) per second "
          "of step time, last window.")),
      peak_flops(gauge_family(r, "wgtrain_peak_flops",
                              "The peak FLOP/s the rank's MFU is measured against (peak_tflops, a GPU's data sheet, "
                              "or a measured matrix product).")),
      mfu(gauge_family(r, "wgtrain_mfu", "Model FLOPs utilisation: model FLOP/s over the peak, last window.")),
      step_duration(histogram_family(r, "wgtrain_step_duration_seconds", "Step durations, data included.")),
      data_wait_seconds(
          gauge_family(r, "wgtrain_data_wait_seconds", "Mean time per step spent waiting for the batch, last window.")),
      data_wait_ratio(
          gauge_family(r, "wgtrain_data_wait_ratio", "Share of step time spent waiting for the batch, last window.")),
      sync_wait_seconds(gauge_family(r, "wgtrain_sync_wait_seconds",
                                     "Mean time per step spent waiting for the other ranks (the gradient exchange "
                                     "after backward, the step's agreements), last window.")),
      busy_seconds(gauge_family(r, "wgtrain_busy_seconds",
                                "Mean step time less the time waiting for the other ranks, last window: the rank's "
                                "own work (compute, data). Synchronous steps wait for the rank with the most.")),
      memory_peak_allocated(
          gauge_family(r, "wgtrain_memory_peak_allocated_bytes", "Allocator peak in the last window.")),
      memory_peak_reserved(gauge_family(
          r, "wgtrain_memory_peak_reserved_bytes",
          "Reserved peak in the last window (CUDA: the caching allocator's reserve; CPU: what the allocator "
          "holds from the system).")),
      memory_capacity(gauge_family(r, "wgtrain_device_memory_capacity_bytes", "Device memory (CPU: physical memory).")),
      nonfinite_losses(counter_family(r, "wgtrain_nonfinite_losses_total", "Non-finite losses seen by the rank.")),
      skipped_steps(counter_family(
          r, "wgtrain_skipped_steps_total",
          "Steps without an optimizer step on every rank: a non-finite loss or gradient (nan_policy skip), a "
          "gradient overflow under loss scaling, no target data.")),
      oom_retries(
          counter_family(r, "wgtrain_oom_retries_total", "Step attempts repeated after running out of memory.")),
      data_skipped_samples(
          counter_family(r, "wgtrain_data_skipped_samples_total",
                         "Samples replaced by a later window: data unreadable, or no target in any stream.")),
      planned_peak(gauge_family(r, "wgtrain_planned_peak_bytes",
                                "The automatic planner's predicted step peak (0: manual plan).")),
      checkpoint_recomputed(
          gauge_family(r, "wgtrain_checkpoint_recomputed", "1 if the piece is recomputed in backward on the rank.")),
      checkpoint_pieces_recomputed(
          gauge_family(r, "wgtrain_checkpoint_pieces_recomputed", "Recomputed pieces of the section on the rank.")),
      job_samples_per_second(gauge_family(r, "wgtrain_job_samples_per_second", "Samples per second, all ranks.")),
      job_tokens_per_second(gauge_family(r, "wgtrain_job_tokens_per_second", "Tokens per second, all ranks.")),
      job_model_flops_per_second(
          gauge_family(r, "wgtrain_job_model_flops_per_second", "Model FLOPs per second, all ranks.")),
      last_step_timestamp(
          gauge_family(r, "wgtrain_last_step_timestamp_seconds", "Unix time of the last finished step.")),
      metrics_window_seconds(
          gauge_family(r, "wgtrain_metrics_window_seconds",
                       "Step time of the last metrics window (its slowest rank): how old the published step can be.")),
      step(gauge_family(r, "wgtrain_step", "Steps finished by the job.")),
      learning_rate(gauge_family(r, "wgtrain_learning_rate", "Current learning rate.")),
      validation_loss(gauge_family(r, "wgtrain_validation_loss",
                                   "Loss on the validation set after the latest mini-epoch (all ranks).")),
      slowest_rank(gauge_family(r, "wgtrain_slowest_rank",
                                "Rank with the most busy time per step (wgtrain_busy_seconds) in the last window: the "
                                "one the others wait for.")),
      fastest_rank(gauge_family(r, "wgtrain_fastest_rank",
                                "Rank with the least busy time per step (wgtrain_busy_seconds) in the last window.")),
      job_memory_peak_max(gauge_family(r, "wgtrain_job_memory_peak_max_bytes",
                                       "The largest memory peak of the last window, and where.")) {}

OutcomeFamilies::OutcomeFamilies(prometheus::Registry& r)
    : end_timestamp(gauge_family(r, "wgtrain_job_end_timestamp_seconds", "Unix time the job ended.")),
      status(gauge_family(r, "wgtrain_job_status", "How the job ended (value 1).")),
      last_step(gauge_family(r, "wgtrain_job_last_step", "Steps the job finished.")) {}

}  // namespace wg::telemetry
