// Measuring the planner's costs (see header).
#include "wg/plan/cost_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "wg/util/units.h"

namespace wg {

double PlanProbe::now_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

// Per key: bytes held after the piece minus before it, summed over the
// piece's calls in one forward (pred/head runs once per stream).
class Recorder : public PieceObserver {
 public:
  explicit Recorder(const PlanProbe& probe) : probe_(probe) {}
  void before(const PieceKey&) override {
    start_bytes_ = probe_.current_bytes();
    start_ = probe_.now_seconds();
  }
  void after(const PieceKey& key, const PieceOutput& out) override {
    auto& e = entries[key.str()];
    e.seconds += probe_.now_seconds() - start_;
    e.retained += probe_.current_bytes() - start_bytes_;
    const int64_t x = out.bytes();
    e.output += x;
    e.gradient = std::max(e.gradient, out.gradient_bytes);  // the same parameters at every call
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
    int64_t retained = 0, output = 0, analytic = 0, gradient = 0;
  };
  std::map<std::string, Entry> entries;

 private:
  const PlanProbe& probe_;
  int64_t start_bytes_ = 0;
  double start_ = 0;
};

RecomputePlan all_set(RecomputePlan p, PieceMode mode) {
  for (size_t i = 0; i < p.size(); ++i)
    p.set_mode(i, mode == PieceMode::Lean && !runs_lean(p.pieces()[i]) ? PieceMode::Keep : mode);
  return p;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One probe under `plan`, timed as a whole; its peak in `peak`.
double timed_probe(PlanProbe& probe, const RecomputePlan& plan, PieceObserver* observer, int64_t& peak) {
  probe.set_plan(plan);
  const double start = probe.now_seconds();
  peak = probe.probe(observer);
  return probe.now_seconds() - start;
}
}  // namespace

CostModel profile_costs(PlanProbe& probe, int repeats) {
  PlanRestorer restore(probe);
  const RecomputePlan none = all_set(restore.saved(), PieceMode::Keep);
  const RecomputePlan lean = all_set(none, PieceMode::Lean);
  const bool any_lean = lean.pieces_lean() > 0;
  probe.set_plan(none);
  CostModel c;
  std::map<std::string, std::vector<double>> times;
  std::vector<double> none_seconds, lean_seconds;
  probe.probe(nullptr);  // warm-up: gradients and caches allocated
  std::map<std::string, Recorder::Entry> lean_entries;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    Recorder rec(probe);
    none_seconds.push_back(timed_probe(probe, none, &rec, c.activations_none_bytes));
    if (any_lean) {  // alternated with the probes above, so that the machine's moods hit both alike
      Recorder lean_rec(probe);
      lean_seconds.push_back(timed_probe(probe, lean, &lean_rec, c.activations_lean_bytes));
      lean_entries = lean_rec.entries;
    }
    c.pieces.clear();
    for (const PieceKey& key : none.pieces()) {
      PieceCost p;
      p.key = key;
      p.rerun_share = probe.rerun_share(key);
      if (const auto it = rec.entries.find(key.str()); it != rec.entries.end()) {
        p.retained_bytes = it->second.retained;
        p.output_bytes = it->second.output;
        p.gradient_bytes = it->second.gradient;
        p.analytic_bytes = it->second.analytic;
        times[key.str()].push_back(it->second.seconds);
      }
      if (any_lean && lean.mode(key) == PieceMode::Lean) {
        const auto it = lean_entries.find(key.str());
        p.lean_bytes = it == lean_entries.end() ? p.retained_bytes : std::max<int64_t>(0, it->second.retained);
        p.lean_share = probe.lean_share(key);
      }
      c.pieces.push_back(p);
    }
  }
  for (auto& p : c.pieces) p.forward_seconds = median(times[p.key.str()]);
  // An embed's input lean and block 0's attention lean: the attention makes
  // the input's output again instead of keeping it, which the probe saw as
  // bytes the attention freed. They are freed only where both are lean:
  // booked to the input (cost_model.h, lean_with_next).
  for (size_t i = 0; i + 1 < c.pieces.size(); ++i) {
    PieceCost &p = c.pieces[i], &q = c.pieces[i + 1];
    if (p.can_run_lean() && q.can_run_lean() && p.key.kind == PieceKind::Input && p.key.section == "embed" &&
        q.key.section_label() == p.key.section_label() && q.key.block == 0 && q.key.kind == PieceKind::Attention) {
      p.lean_with_next = true;
      p.lean_bytes = std::max<int64_t>(0, p.lean_bytes - p.output_bytes);
      q.lean_bytes += p.output_bytes;
    }
  }
  c.base_bytes = probe.steady_base_bytes();
  probe.set_plan(all_set(none, PieceMode::Recompute));
  c.activations_all_bytes = probe.probe(nullptr);
  c.calibrate();
  if (any_lean) c.calibrate_lean(median(lean_seconds) - median(none_seconds));
  return c;
}

std::string cost_table(const CostModel& c) {
  std::string out =
      "piece                          kept MiB  lean MiB  output MiB  grad MiB  analytic MiB  forward ms  lean ms  "
      "recompute ms\n";
  char line[400];
  for (size_t i = 0; i < c.pieces.size(); ++i) {
    const PieceCost& p = c.pieces[i];
    char lean_mib[16] = "        -", lean_ms[16] = "       -";
    if (p.can_run_lean()) {
      std::snprintf(lean_mib, sizeof lean_mib, "%9.2f", double(p.lean_bytes) / kMiB);
      std::snprintf(lean_ms, sizeof lean_ms, "%8.3f", c.added_seconds(i, PieceMode::Lean) * 1e3);
    }
    std::snprintf(line, sizeof line, "%-30s %9.2f %s %11.2f %9.2f %13.2f %11.3f %s %13.3f\n", p.key.str().c_str(),
                  double(p.retained_bytes) / kMiB, lean_mib, double(p.output_bytes) / kMiB,
                  double(p.gradient_bytes) / kMiB, double(p.analytic_bytes) / kMiB, p.forward_seconds * 1e3, lean_ms,
                  p.recompute_seconds() * 1e3);
    out += line;
  }
  char lean[160] = "";
  if (c.activations_lean_bytes > 0)
    std::snprintf(lean, sizeof lean, ", %.2f MiB with every piece that can lean lean (predicted %.2f)",
                  double(c.activations_lean_bytes) / kMiB,
                  double(c.peak(c.all(PieceMode::Lean)) - c.base_bytes) / kMiB);
  std::snprintf(line, sizeof line,
                "held at step start %.2f MiB; step peak above it %.2f MiB with nothing, %.2f MiB with everything "
                "recomputed%s; calibrated alpha %.2f (kept and lean %.2f), transient %.2f MiB, lean reruns %.3f ms "
                "per MiB made again",
                double(c.base_bytes) / kMiB, double(c.activations_none_bytes) / kMiB,
                double(c.activations_all_bytes) / kMiB, lean, c.alpha, c.alpha_kept, double(c.transient) / kMiB,
                c.lean_seconds_per_byte * 1e3 * kMiB);
  return out + line;
}

}  // namespace wg
