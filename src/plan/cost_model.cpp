// The recomputation cost model and planner (see header).
#include "wg/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "wg/util/units.h"

namespace wg {

namespace {
// max_p (prefix of kept bytes + (1 + alpha) retained_p), the peak above base
// without the transient.
int64_t activation_peak(const std::vector<PieceCost>& pieces, const std::vector<bool>& on, double alpha) {
  int64_t prefix = 0, worst = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    worst = std::max(worst, prefix + int64_t(std::llround((1 + alpha) * double(pieces[i].retained_bytes))));
    prefix += on[i] ? pieces[i].output_bytes : pieces[i].retained_bytes;
  }
  return worst;
}
}  // namespace

void CostModel::calibrate() {
  const std::vector<bool> none(pieces.size(), false), all(pieces.size(), true);
  alpha = 0;
  if (activations_all_bytes > 0) {
    double best_err = std::numeric_limits<double>::infinity();
    for (int i = 0; i <= 400; ++i) {  // alpha in [0, 4]
      const double a = i / 100.0;
      const int64_t t = activations_none_bytes - activation_peak(pieces, none, a);
      const double err = std::abs(double(activation_peak(pieces, all, a) + t - activations_all_bytes));
      if (err < best_err) { best_err = err; alpha = a; }
    }
  }
  transient = activations_none_bytes - activation_peak(pieces, none, alpha);
}

int64_t CostModel::peak(const std::vector<bool>& on) const {
  return base_bytes + activation_peak(pieces, on, alpha) + transient;
}

double CostModel::added_seconds(const std::vector<bool>& on) const {
  double t = 0;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (on[i]) t += pieces[i].recompute_seconds();
  return t;
}

PlannedRecompute plan_for_budget(const CostModel& c, int64_t budget) {
  const size_t n = c.pieces.size();
  PlannedRecompute out;
  out.recompute.assign(n, false);
  std::vector<bool> all(n, true);
  for (size_t i = 0; i < n; ++i)
    if (c.pieces[i].forced == 0) all[i] = false;
  if (c.peak(all) > budget)
    throw std::invalid_argument("memory budget of " + std::to_string(budget) + " bytes (" +
                                std::to_string(double(budget) / kGiB) +
                                " GiB) is below the smallest predicted step peak, " + std::to_string(c.peak(all)) +
                                " bytes with every piece recomputed (that a rule does not fix)");
  for (size_t i = 0; i < n; ++i) out.recompute[i] = c.pieces[i].forced == 1;
  if (c.peak(out.recompute) <= budget) {  // nothing (more) to recompute
    out.added_seconds = c.added_seconds(out.recompute);
    out.predicted_peak_bytes = c.peak(out.recompute);
    return out;
  }
  // Room for activations: peak <= budget  <=>  prefix_p + retained_p <= room for every p.
  const int64_t room = budget - c.base_bytes - c.transient;
  int64_t total = 0;
  for (const auto& p : c.pieces) total += p.retained_bytes;
  const double unit = std::max(1.0, double(total) / kPlannerGrid);
  auto up = [&](int64_t b) { return int(std::ceil(double(b) / unit)); };  // kept bytes: rounded up
  const int W = up(total) + 1;
  const double inf = std::numeric_limits<double>::infinity();
  // dp[w]: least added time with w grid units kept by the pieces so far.
  std::vector<double> dp(size_t(W) + 1, inf);
  std::vector<std::vector<signed char>> choice(n, std::vector<signed char>(size_t(W) + 1, -1));
  dp[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    const PieceCost& p = c.pieces[i];
    std::vector<double> next(size_t(W) + 1, inf);
    for (int w = 0; w <= W; ++w) {
      if (dp[size_t(w)] == inf) continue;
      // this piece's backward holds the prefix plus all its activations
      if (double(w) * unit + (1 + c.alpha) * double(p.retained_bytes) > double(room)) continue;
      const int keep = std::min(W, w + up(p.retained_bytes)), again = std::min(W, w + up(p.output_bytes));
      if (p.forced != 1 && dp[size_t(w)] < next[size_t(keep)]) {
        next[size_t(keep)] = dp[size_t(w)];
        choice[i][size_t(keep)] = 0;
      }
      const double t = dp[size_t(w)] + p.recompute_seconds();
      if (p.forced != 0 && t < next[size_t(again)]) {
        next[size_t(again)] = t;
        choice[i][size_t(again)] = 1;
      }
    }
    dp.swap(next);
  }
  int best = -1;
  for (int w = 0; w <= W; ++w)
    if (dp[size_t(w)] < inf && (best < 0 || dp[size_t(w)] < dp[size_t(best)])) best = w;
  if (best < 0) {  // only the grid's rounding stands between the budget and the all-recompute plan
    out.recompute = all;
  } else {
    // Walk back: the kept units before piece i follow from the choice at i.
    int w = best;
    for (size_t i = n; i-- > 0;) {
      const bool again = choice[i][size_t(w)] == 1;
      out.recompute[i] = again;
      w -= again ? up(c.pieces[i].output_bytes) : up(c.pieces[i].retained_bytes);
      w = std::max(0, w);
    }
  }
  out.predicted_peak_bytes = c.peak(out.recompute);
  out.added_seconds = c.added_seconds(out.recompute);
  return out;
}

int next_piece_to_recompute(const CostModel& c, const std::vector<bool>& on) {
  int64_t left = 0;  // bytes the remaining pieces could still free
  for (size_t i = 0; i < c.pieces.size(); ++i)
    if (!on[i] && c.pieces[i].forced != 0) left += c.pieces[i].saved_bytes();
  // First among pieces that free at least 1% of that (smaller ones would
  // not help), then among all.
  for (const bool filter : {true, false}) {
    int best = -1;
    double best_rate = -1;
    for (size_t i = 0; i < c.pieces.size(); ++i) {
      if (on[i] || c.pieces[i].forced == 0) continue;
      if (filter && c.pieces[i].saved_bytes() * 100 < left) continue;
      const double rate = double(c.pieces[i].saved_bytes()) / std::max(1e-9, c.pieces[i].recompute_seconds());
      if (rate > best_rate) {
        best_rate = rate;
        best = int(i);
      }
    }
    if (best >= 0) return best;
  }
  return -1;
}

}  // namespace wg
