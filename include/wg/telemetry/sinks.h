// The rank-0 sinks of step metrics: a progress line in the log, and the
// run directory's metrics.jsonl (one JSON object per record, every field of
// StepMetrics) and summary.json.
#pragma once

#include <fstream>
#include <string>

#include "wg/telemetry/step_metrics.h"

namespace wg {

// Progress line every `every` steps (and on the last), summary at the end.
class LogSink : public MetricsSink {
 public:
  explicit LogSink(int every, PlanPrediction prediction = {}) : every_(every), prediction_(prediction) {}
  void on_step(const StepMetrics& m) override;
  void on_end(const RunSummary& s) override;

 private:
  int every_;
  PlanPrediction prediction_;
};

// One JSON object per line every `every` steps (and with every validation);
// summary.json at the end. With `names`, each record also holds the losses
// per stream and channel as WeatherGenerator's train logger names them,
// averaged over the steps since the last record ignoring NaN (a stream
// without data): "loss.LossPhysical.<stream>.<fct>.loss_avg" and
// "loss.LossPhysical.<stream>.<fct>.<channel>" (null: no data).
class JsonlSink : public MetricsSink {
 public:
  JsonlSink(const std::string& run_dir, int every, PlanPrediction prediction = {}, StepLossNames names = {});
  void on_step(const StepMetrics& m) override;
  void on_end(const RunSummary& s) override;

 private:
  std::string run_dir_;
  int every_;
  PlanPrediction prediction_;
  StepLossNames names_;
  std::vector<std::vector<double>> sum_;  // [key][channel] finite values since the last record
  std::vector<std::vector<int>> count_;
  std::ofstream out_;
};

// The JSON texts of the records (one line each). `losses`: extra
// "loss.LossPhysical...." fields (NaN written as null).
std::string to_json(const StepMetrics& m, const std::vector<std::pair<std::string, double>>& losses = {});
std::string to_json(const RunSummary& s, const PlanPrediction& prediction = {});

}  // namespace wg
