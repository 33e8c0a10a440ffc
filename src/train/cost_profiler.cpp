// Measuring the planner's costs (see header).
#include "wg/train/cost_profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "wg/train/trainer.h"
#include "wg/util/memory.h"

namespace wg {

namespace {
using Clock = std::chrono::steady_clock;

// Per key: bytes held after the piece minus before it, summed over the
// piece's calls in one forward (pred/head runs once per stream).
class Recorder : public PieceObserver {
 public:
  explicit Recorder(std::string device) : device_(std::move(device)) {}
  void before(const std::string&) override {
    start_bytes_ = memory_snapshot(device_).current_bytes;
    start_ = Clock::now();
  }
  void after(const std::string& key, const torch::Tensor& out) override {
    auto& e = entries[key];
    e.seconds += std::chrono::duration<double>(Clock::now() - start_).count();
    e.retained += memory_snapshot(device_).current_bytes - start_bytes_;
    e.output += out.numel() * out.element_size();
    // Analytic: attention keeps ~ (norm, q, k, v, q/k norms, context) 7 copies
    // of its input plus the head scores; an MLP its norm output and 2 x 2
    // hidden-width tensors. The output shape tells the input's.
    const int64_t x = out.numel() * out.element_size();
    if (key.find(".attn") != std::string::npos && out.dim() == 3) {
      const int64_t s = out.size(1);
      e.analytic += 8 * x + 2 * out.size(0) * s * s * out.element_size();  // scores: heads x s^2 ~ assume 1 head-equivalent x2
    } else if (key.find(".mlp") != std::string::npos) {
      e.analytic += 2 * x + 2 * 2 * 2 * x;
    } else {
      e.analytic += 2 * x;
    }
  }
  struct Entry {
    double seconds = 0;
    int64_t retained = 0, output = 0, analytic = 0;
  };
  std::map<std::string, Entry> entries;

 private:
  std::string device_;
  int64_t start_bytes_ = 0;
  Clock::time_point start_;
};
}  // namespace

CostModel profile_costs(Trainer& trainer, const Batch& batch, int repeats) {
  const CheckpointPlan saved = trainer.plan();
  CheckpointPlan none = saved;
  for (const auto& k : none.keys()) none.set(k, false);
  trainer.set_plan(none);
  CostModel c;
  std::map<std::string, std::vector<double>> times;
  try {
    trainer.probe(batch, nullptr);  // warm-up: gradients and caches allocated
    for (int r = 0; r < std::max(1, repeats); ++r) {
      Recorder rec(trainer.device_name());
      c.activations_none_bytes = trainer.probe(batch, &rec);
      c.pieces.clear();
      for (const auto& key : none.keys()) {
        const auto it = rec.entries.find(key);
        PieceCost p;
        p.key = key;
        if (it != rec.entries.end()) {
          p.retained_bytes = it->second.retained;
          p.output_bytes = it->second.output;
          p.analytic_bytes = it->second.analytic;
          times[key].push_back(it->second.seconds);
        }
        c.pieces.push_back(p);
      }
    }
  } catch (...) {
    trainer.set_plan(saved);
    throw;
  }
  for (auto& p : c.pieces) {
    auto& t = times[p.key];
    if (t.empty()) continue;
    std::sort(t.begin(), t.end());
    p.forward_seconds = t[t.size() / 2];
  }
  c.base_bytes = trainer.steady_base_bytes();
  CheckpointPlan all = none;
  for (const auto& k : all.keys()) all.set(k, true);
  try {
    trainer.set_plan(all);
    c.activations_all_bytes = trainer.probe(batch, nullptr);
  } catch (...) {
    trainer.set_plan(saved);
    throw;
  }
  c.calibrate();
  trainer.set_plan(saved);
  return c;
}

std::string cost_table(const CostModel& c) {
  std::string out = "piece                          kept MiB  output MiB  analytic MiB  forward ms\n";
  char line[160];
  for (const auto& p : c.pieces) {
    std::snprintf(line, sizeof line, "%-30s %9.2f %11.2f %13.2f %11.3f\n", p.key.c_str(),
                  double(p.retained_bytes) / 1048576.0, double(p.output_bytes) / 1048576.0,
                  double(p.analytic_bytes) / 1048576.0, p.forward_seconds * 1e3);
    out += line;
  }
  std::snprintf(line, sizeof line,
                "held at step start %.2f MiB; step peak above it %.2f MiB with nothing, %.2f MiB with everything "
                "recomputed; calibrated alpha %.2f, transient %.2f MiB",
                double(c.base_bytes) / 1048576.0, double(c.activations_none_bytes) / 1048576.0,
                double(c.activations_all_bytes) / 1048576.0, c.alpha, double(c.transient) / 1048576.0);
  return out + line;
}

}  // namespace wg
