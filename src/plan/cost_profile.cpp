// Measuring the planner's costs (see header).
#include "wg/plan/cost_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "wg/util/units.h"

namespace wg {

namespace {
using Clock = std::chrono::steady_clock;

// Per key: bytes held after the piece minus before it, summed over the
// piece's calls in one forward (pred/head runs once per stream).
class Recorder : public PieceObserver {
 public:
  explicit Recorder(const PlanProbe& probe) : probe_(probe) {}
  void before(const PieceKey&) override {
    start_bytes_ = probe_.current_bytes();
    start_ = Clock::now();
  }
  void after(const PieceKey& key, const PieceOutput& out) override {
    auto& e = entries[key.str()];
    e.seconds += std::chrono::duration<double>(Clock::now() - start_).count();
    e.retained += probe_.current_bytes() - start_bytes_;
    const int64_t x = out.bytes();
    e.output += x;
    // Analytic: attention keeps ~ (norm, q, k, v, q/k norms, context) 7 copies
    // of its input plus the head scores; an MLP its norm output and 2 x 2
    // hidden-width tensors. The output shape tells the input's.
    if (key.kind == PieceKind::Attention && out.sizes.size() == 3) {
      const int64_t s = out.sizes[1];
      e.analytic += 8 * x + 2 * out.sizes[0] * s * s * out.element_size;
    } else if (key.kind == PieceKind::Mlp) {
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
  const PlanProbe& probe_;
  int64_t start_bytes_ = 0;
  Clock::time_point start_;
};

RecomputePlan all_set(RecomputePlan p, bool on) {
  for (size_t i = 0; i < p.size(); ++i) p.set(i, on);
  return p;
}
}  // namespace

CostModel profile_costs(PlanProbe& probe, int repeats) {
  PlanRestorer restore(probe);
  const RecomputePlan none = all_set(restore.saved(), false);
  probe.set_plan(none);
  CostModel c;
  std::map<std::string, std::vector<double>> times;
  probe.probe(nullptr);  // warm-up: gradients and caches allocated
  for (int r = 0; r < std::max(1, repeats); ++r) {
    Recorder rec(probe);
    c.activations_none_bytes = probe.probe(&rec);
    c.pieces.clear();
    for (const PieceKey& key : none.pieces()) {
      PieceCost p;
      p.key = key;
      p.rerun_share = probe.rerun_share(key);
      if (const auto it = rec.entries.find(key.str()); it != rec.entries.end()) {
        p.retained_bytes = it->second.retained;
        p.output_bytes = it->second.output;
        p.analytic_bytes = it->second.analytic;
        times[key.str()].push_back(it->second.seconds);
      }
      c.pieces.push_back(p);
    }
  }
  for (auto& p : c.pieces) {
    auto& t = times[p.key.str()];
    if (t.empty()) continue;
    std::sort(t.begin(), t.end());
    p.forward_seconds = t[t.size() / 2];
  }
  c.base_bytes = probe.steady_base_bytes();
  probe.set_plan(all_set(none, true));
  c.activations_all_bytes = probe.probe(nullptr);
  c.calibrate();
  return c;
}

std::string cost_table(const CostModel& c) {
  std::string out = "piece                          kept MiB  output MiB  analytic MiB  forward ms  recompute ms\n";
  char line[200];
  for (const auto& p : c.pieces) {
    std::snprintf(line, sizeof line, "%-30s %9.2f %11.2f %13.2f %11.3f %13.3f\n", p.key.str().c_str(),
                  double(p.retained_bytes) / kMiB, double(p.output_bytes) / kMiB, double(p.analytic_bytes) / kMiB,
                  p.forward_seconds * 1e3, p.recompute_seconds() * 1e3);
    out += line;
  }
  std::snprintf(line, sizeof line,
                "held at step start %.2f MiB; step peak above it %.2f MiB with nothing, %.2f MiB with everything "
                "recomputed; calibrated alpha %.2f, transient %.2f MiB",
                double(c.base_bytes) / kMiB, double(c.activations_none_bytes) / kMiB,
                double(c.activations_all_bytes) / kMiB, c.alpha, double(c.transient) / kMiB);
  return out + line;
}

}  // namespace wg
