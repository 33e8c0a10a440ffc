// Metric sinks (see header).
#include "wg/train/metrics.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <stdexcept>

#include "wg/util/logging.h"

namespace wg {

namespace {
bool due(int64_t step, int64_t total, int every) { return (step + 1) % every == 0 || step + 1 == total; }
}  // namespace

void LogSink::on_step(const StepMetrics& m) {
  if (m.validation_loss >= 0)
    spdlog::info("validation after step {}: loss {:.5f}", m.step + 1, m.validation_loss);
  if (!due(m.step, m.total_steps, every_)) return;
  spdlog::info("step {:>6}/{} loss {:.5f} lr {:.3e} grad_norm {:.3f} samples/s {:.1f} tokens/s {:.0f} peak {}{}",
               m.step + 1, m.total_steps, m.loss, m.lr, m.grad_norm, m.samples_per_second, m.tokens_per_second,
               format_bytes(m.peak_bytes), m.skipped ? " (skipped: non-finite loss)" : "");
}

void LogSink::on_end(const RunSummary& s) {
  if (s.planned_peak_bytes > 0)
    spdlog::info("auto plan: predicted step peak {}, measured {} after the first step ({:+.1f}%), predicted recompute "
                 "{:.1f} ms/step",
                 format_bytes(s.planned_peak_bytes), format_bytes(s.steady_peak_bytes),
                 100.0 * (double(s.steady_peak_bytes) / double(s.planned_peak_bytes) - 1.0), s.planned_added_seconds * 1e3);
  spdlog::info("summary: {} steps in {:.1f} s, loss {:.5f} (first logged) -> {:.5f} (last logged), "
               "{:.1f} samples/s, peak memory {}, {} skipped steps",
               s.steps, s.seconds, s.first_loss, s.last_loss, s.mean_samples_per_second, format_bytes(s.peak_bytes),
               s.skipped_steps);
}

std::string to_json(const StepMetrics& m) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"step\":%lld,\"loss\":%.8g,\"lr\":%.8g,\"grad_norm\":%.8g,\"step_seconds\":%.6g,"
                "\"data_seconds\":%.6g,\"skipped_samples\":%lld,\"samples_per_second\":%.6g,\"tokens_per_second\":%.6g,"
                "\"peak_bytes\":%lld,\"activation_bytes\":%lld,\"skipped\":%s,\"oom_retries\":%d",
                (long long)m.step, m.loss, m.lr, m.grad_norm, m.step_seconds, m.data_seconds,
                (long long)m.skipped_samples, m.samples_per_second, m.tokens_per_second, (long long)m.peak_bytes,
                (long long)m.activation_bytes, m.skipped ? "true" : "false", m.oom_retries);
  std::string out = buf;
  if (m.validation_loss >= 0) {
    std::snprintf(buf, sizeof buf, ",\"validation_loss\":%.8g", m.validation_loss);
    out += buf;
  }
  return out + "}";
}

std::string to_json(const RunSummary& s) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"steps\":%lld,\"skipped_steps\":%lld,\"seconds\":%.6g,\"first_loss\":%.8g,"
                "\"last_loss\":%.8g,\"mean_samples_per_second\":%.6g,\"peak_bytes\":%lld,\"steady_peak_bytes\":%lld,\"oom_retries\":%lld,"
                "\"planned_peak_bytes\":%lld,\"planned_added_seconds\":%.6g,\"last_validation_loss\":%.8g}",
                (long long)s.steps, (long long)s.skipped_steps, s.seconds, s.first_loss, s.last_loss,
                s.mean_samples_per_second, (long long)s.peak_bytes, (long long)s.steady_peak_bytes,
                (long long)s.oom_retries,
                (long long)s.planned_peak_bytes, s.planned_added_seconds, s.last_validation_loss);
  return buf;
}

JsonlSink::JsonlSink(const std::string& run_dir, int every) : run_dir_(run_dir), every_(every) {
  out_.open(run_dir_ + "/metrics.jsonl", std::ios::app);
  if (!out_) throw std::runtime_error("cannot write " + run_dir_ + "/metrics.jsonl");
}

void JsonlSink::on_step(const StepMetrics& m) {
  if (!due(m.step, m.total_steps, every_) && m.validation_loss < 0) return;
  out_ << to_json(m) << '\n';
  out_.flush();
}

void JsonlSink::on_end(const RunSummary& s) {
  std::ofstream f(run_dir_ + "/summary.json");
  f << to_json(s) << '\n';
}

}  // namespace wg
