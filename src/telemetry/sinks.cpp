// Metric sinks (see header).
#include "wg/telemetry/sinks.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "wg/util/atomic_file.h"
#include "wg/util/units.h"

namespace wg {

namespace {
bool due(int64_t step, int64_t total, int every) { return (step + 1) % every == 0 || step + 1 == total; }

// Non-finite numbers as JSON null (JSON has no NaN), so every line parses.
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

// Why a step took no optimizer step, for its log line.
const char* skip_note(const StepMetrics& m) {
  if (!m.skipped) return "";
  if (m.nonfinite_grad) return " (skipped: non-finite gradient)";
  if (m.nonfinite_loss) return " (skipped: non-finite loss)";
  return " (skipped: no target data)";
}
}  // namespace

void LogSink::on_step(const StepMetrics& m) {
  if (m.validation_loss >= 0)
    spdlog::info("validation after step {}: loss {:.5f}", m.step + 1, m.validation_loss);
  if (!due(m.step, m.total_steps, every_)) return;
  const std::string mfu_text = m.peak_flops > 0 ? fmt::format(" MFU {:.1f}%", 100.0 * mfu(m)) : "";
  const std::string scale_text = m.loss_scale != 1.0 ? fmt::format(" loss_scale {:g}", m.loss_scale) : "";
  spdlog::info(
      "step {:>6}/{} loss {:.5f} lr {:.3e} grad_norm {:.3f} samples/s {:.1f} tokens/s {:.0f} "
      "GFLOP/s {:.1f}{} peak {}{}{}",
      m.step + 1, m.total_steps, m.loss, m.lr, m.grad_norm, m.samples_per_second, m.tokens_per_second,
      model_flops_per_second(m) * 1e-9, mfu_text, format_bytes(m.peak_bytes), scale_text, skip_note(m));
}

void LogSink::on_end(const RunSummary& s) {
  if (prediction_.peak_bytes > 0)
    spdlog::info(
        "auto plan: predicted step peak {}, measured {} after the first step ({:+.1f}%), predicted added time (lean "
        "and recomputed pieces) "
        "{:.1f} ms/step",
        format_bytes(prediction_.peak_bytes), format_bytes(s.steady_peak_bytes),
        100.0 * (double(s.steady_peak_bytes) / double(prediction_.peak_bytes) - 1.0), prediction_.added_seconds * 1e3);
  spdlog::info("summary: {} steps in {:.1f} s, loss {:.5f} (first logged) -> {:.5f} (last logged), "
               "{:.1f} samples/s, peak memory {}, {} skipped steps",
               s.steps, s.seconds, s.first_loss, s.last_loss, s.mean_samples_per_second, format_bytes(s.peak_bytes),
               s.skipped_steps);
}

std::string to_json(const StepMetrics& m, const std::vector<std::pair<std::string, double>>& losses) {
  nlohmann::json j = {
      {"step", m.step},
      {"total_steps", m.total_steps},
      {"loss", number(m.loss)},
      {"lr", m.lr},
      {"grad_norm", number(m.grad_norm)},
      {"step_seconds", m.step_seconds},
      {"compute_seconds", m.compute_seconds},
      {"start_bytes", m.start_bytes},
      {"data_seconds", m.data_seconds},
      {"sync_wait_seconds", m.sync_wait_seconds},
      {"skipped_samples", m.skipped_samples},
      {"samples_per_second", m.samples_per_second},
      {"tokens_per_second", m.tokens_per_second},
      {"model_flops", m.model_flops},
      {"model_flops_per_second", model_flops_per_second(m)},
      {"mfu", m.peak_flops > 0 ? nlohmann::json(mfu(m)) : nlohmann::json(nullptr)},
      {"peak_bytes", m.peak_bytes},
      {"peak_reserved_bytes", m.peak_reserved_bytes},
      {"activation_bytes", m.activation_bytes},
      {"nonfinite_loss", m.nonfinite_loss},
      {"nonfinite_grad", m.nonfinite_grad},
      {"skipped", m.skipped},
      {"oom_retries", m.oom_retries},
      {"loss_scale", m.loss_scale},
  };
  if (m.validation_loss >= 0) j["validation_loss"] = m.validation_loss;
  for (const auto& [key, value] : losses) j[key] = number(value);
  return j.dump();
}

std::string to_json(const RunSummary& s, const PlanPrediction& p) {
  const nlohmann::json j = {
      {"steps", s.steps},
      {"next_step", s.next_step},
      {"stopped_early", s.stopped_early},
      {"skipped_steps", s.skipped_steps},
      {"seconds", s.seconds},
      {"first_loss", number(s.first_loss)},
      {"last_loss", number(s.last_loss)},
      {"mean_samples_per_second", s.mean_samples_per_second},
      {"peak_bytes", s.peak_bytes},
      {"steady_peak_bytes", s.steady_peak_bytes},
      {"oom_retries", s.oom_retries},
      {"planned_peak_bytes", p.peak_bytes},
      {"planned_added_seconds", p.added_seconds},
      {"last_validation_loss", s.last_validation_loss},
  };
  return j.dump();
}

JsonlSink::JsonlSink(const std::string& run_dir, int every, PlanPrediction prediction, StepLossNames names)
    : run_dir_(run_dir), every_(every), prediction_(prediction), names_(std::move(names)) {
  for (const auto& channels : names_.channels) {
    sum_.emplace_back(channels.size(), 0.0);
    count_.emplace_back(channels.size(), 0);
  }
  out_.open(run_dir_ + "/metrics.jsonl", std::ios::app);
  if (!out_) throw std::runtime_error("cannot write " + run_dir_ + "/metrics.jsonl");
}

void JsonlSink::on_step(const StepMetrics& m) {
  for (size_t k = 0; k < sum_.size() && k < m.channel_losses.size(); ++k)
    for (size_t c = 0; c < sum_[k].size() && c < m.channel_losses[k].size(); ++c)
      if (std::isfinite(m.channel_losses[k][c])) {
        sum_[k][c] += m.channel_losses[k][c];
        ++count_[k][c];
      }
  if (!due(m.step, m.total_steps, every_) && m.validation_loss < 0) return;
  std::vector<std::pair<std::string, double>> losses;
  for (size_t k = 0; k < sum_.size(); ++k) {
    const std::string base = "loss.LossPhysical." + names_.channel_loss_keys[k];
    double total = 0;
    int n = 0;
    std::vector<std::pair<std::string, double>> channels;
    for (size_t c = 0; c < sum_[k].size(); ++c) {
      const double mean = count_[k][c] > 0 ? sum_[k][c] / count_[k][c] : std::numeric_limits<double>::quiet_NaN();
      if (count_[k][c] > 0) total += mean, ++n;
      channels.emplace_back(base + "." + names_.channels[k][c], mean);
      sum_[k][c] = 0;
      count_[k][c] = 0;
    }
    losses.emplace_back(base + ".loss_avg", n > 0 ? total / n : std::numeric_limits<double>::quiet_NaN());
    losses.insert(losses.end(), channels.begin(), channels.end());
  }
  out_ << to_json(m, losses) << '\n';
  out_.flush();
}

void JsonlSink::on_end(const RunSummary& s) {
  write_file_atomically(run_dir_ + "/summary.json", to_json(s, prediction_) + "\n");
}

}  // namespace wg
