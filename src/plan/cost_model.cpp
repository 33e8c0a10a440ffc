// The recomputation cost model and planner (see header).
#include "wg/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "wg/util/units.h"

namespace wg {

int64_t PieceCost::kept_bytes(PieceMode mode) const {
  switch (mode) {
    case PieceMode::Keep: return retained_bytes;
    case PieceMode::Lean: return can_run_lean() ? lean_bytes : retained_bytes;
    case PieceMode::Recompute: return output_bytes;
  }
  return retained_bytes;
}

namespace {
// What piece p's backward holds besides the pieces before it: its
// activations and temporaries, (1 + alpha) times what it keeps without
// recomputation (alpha for a recomputed piece, alpha_kept for the others),
// and the gradients of the pieces after it.
struct OwnBytes {
  std::vector<int64_t> kept, recomputed;  // per piece
  int64_t at(size_t i, PieceMode mode) const { return mode == PieceMode::Recompute ? recomputed[i] : kept[i]; }
};
OwnBytes own_bytes(const std::vector<PieceCost>& pieces, double alpha, double alpha_kept) {
  OwnBytes own{std::vector<int64_t>(pieces.size()), std::vector<int64_t>(pieces.size())};
  int64_t gradients = 0;
  for (size_t i = pieces.size(); i-- > 0;) {
    const double r = double(pieces[i].retained_bytes);
    own.kept[i] = int64_t(std::llround((1 + alpha_kept) * r)) + gradients;
    own.recomputed[i] = int64_t(std::llround((1 + alpha) * r)) + gradients;
    gradients += pieces[i].gradient_bytes;
  }
  return own;
}

// max_p (prefix of kept bytes + own_p), the peak above base without the
// transient; at least all that is kept at the end of forward.
int64_t activation_peak(const CostModel& c, const PlanModes& modes, double alpha, double alpha_kept) {
  const OwnBytes own = own_bytes(c.pieces, alpha, alpha_kept);
  int64_t prefix = 0, worst = 0;
  for (size_t i = 0; i < c.pieces.size(); ++i) {
    worst = std::max(worst, prefix + own.at(i, modes.at(i)));
    prefix += c.kept_bytes(modes, i);
  }
  return std::max(worst, prefix);
}

constexpr PieceMode kModes[] = {PieceMode::Keep, PieceMode::Lean, PieceMode::Recompute};
}  // namespace

int64_t CostModel::kept_bytes(const PlanModes& modes, size_t i) const {
  const PieceCost& p = pieces.at(i);
  const bool alone = p.lean_with_next && modes.at(i) == PieceMode::Lean &&
                     (i + 1 == pieces.size() || modes.at(i + 1) != PieceMode::Lean);
  return p.kept_bytes(modes.at(i)) + (alone ? p.output_bytes : 0);  // alone, nothing makes its output again
}

PlanModes CostModel::all(PieceMode mode, bool rules) const {
  PlanModes out;
  for (const PieceCost& p : pieces) {
    if (rules && p.forced) {
      out.push_back(*p.forced);
    } else {
      out.push_back(mode == PieceMode::Lean && !p.can_run_lean() ? PieceMode::Keep : mode);
    }
  }
  return out;
}

void CostModel::calibrate() {
  const PlanModes none = all(PieceMode::Keep), lean = all(PieceMode::Lean), every = all(PieceMode::Recompute);
  // The alpha in [lowest / 100, 4] that makes `plan` peak at `measured`
  // when `transient` is set from none's peak.
  auto fit = [&](const PlanModes& plan, int64_t measured, bool kept_too, int lowest) {
    double best = 0, best_err = std::numeric_limits<double>::infinity();
    for (int i = lowest; i <= 400; ++i) {
      const double a = i / 100.0, k = kept_too ? a : alpha_kept;
      const int64_t t = activations_none_bytes - activation_peak(*this, none, a, k);
      const double err = std::abs(double(activation_peak(*this, plan, a, k) + t - measured));
      if (err < best_err || (err == best_err && std::abs(a) < std::abs(best))) {  // ties: the nearest to 0
        best_err = err;
        best = a;
      }
    }
    return best;
  };
  alpha = alpha_kept = 0;
  const bool any_lean = lean != none && activations_lean_bytes > 0;
  // None and lean recompute nothing. Below 0: a kept or lean piece's
  // backward lets some of its activations go before its peak (an MLP its
  // hidden activations once their weight's gradient is made).
  if (any_lean) alpha_kept = fit(lean, activations_lean_bytes, true, -50);
  if (activations_all_bytes > 0) {
    alpha = fit(every, activations_all_bytes, !any_lean, 0);
    if (!any_lean) alpha_kept = alpha;
  }
  transient = activations_none_bytes - activation_peak(*this, none, alpha, alpha_kept);
}

void CostModel::calibrate_lean(double measured_seconds) {
  double products = 0;
  int64_t rebuilt = 0;
  for (const PieceCost& p : pieces) {
    if (!p.can_run_lean()) continue;
    products += p.forward_seconds * p.lean_share;
    rebuilt += p.lean_rebuilt_bytes();
  }
  lean_seconds_per_byte = rebuilt > 0 ? std::max(0.0, measured_seconds - products) / double(rebuilt) : 0.0;
}

int64_t CostModel::peak(const PlanModes& modes) const {
  return base_bytes + activation_peak(*this, modes, alpha, alpha_kept) + transient;
}

double CostModel::added_seconds(size_t i, PieceMode mode) const {
  const PieceCost& p = pieces.at(i);
  switch (mode) {
    case PieceMode::Keep: return 0;
    case PieceMode::Lean:
      if (!p.can_run_lean()) return 0;
      return p.forward_seconds * p.lean_share + lean_seconds_per_byte * double(p.lean_rebuilt_bytes());
    case PieceMode::Recompute: return p.recompute_seconds();
  }
  return 0;
}

double CostModel::added_seconds(const PlanModes& modes) const {
  double t = 0;
  for (size_t i = 0; i < pieces.size(); ++i) t += added_seconds(i, modes.at(i));
  return t;
}

PlanModes smallest_plan(const CostModel& c) {
  PlanModes modes = c.all(PieceMode::Recompute, true);
  for (size_t i = 0; i + 1 < c.pieces.size(); ++i) {
    const PieceCost &p = c.pieces[i], &q = c.pieces[i + 1];
    if (!p.lean_with_next || p.forced || q.forced || !p.can_run_lean() || !q.can_run_lean()) continue;
    PlanModes pair = modes;
    pair[i] = pair[i + 1] = PieceMode::Lean;
    if (c.peak(pair) < c.peak(modes)) modes = pair;
  }
  return modes;
}

namespace {
// Bytes a step of the planner's grid: 1/kPlannerGrid of all the pieces keep
// without recomputation.
double grid_unit(const CostModel& c) {
  int64_t total = 0;
  for (const auto& p : c.pieces) total += p.retained_bytes;
  return std::max(1.0, double(total) / kPlannerGrid);
}

// The fastest plan whose predicted peak fits `budget` on the planner's
// byte grid (cost_model.h), or none where no plan fits it.
std::optional<PlanModes> fastest_within(const CostModel& c, int64_t budget) {
  const size_t n = c.pieces.size();
  // Room for activations: peak <= budget  <=>  prefix_p + own_p <= room for every p.
  const int64_t room = budget - c.base_bytes - c.transient;
  const OwnBytes own = own_bytes(c.pieces, c.alpha, c.alpha_kept);
  const double unit = grid_unit(c);
  auto up = [&](int64_t b) { return int(std::ceil(double(b) / unit)); };  // kept bytes: rounded up
  // Where the piece before is lean only with this one and lean, this one
  // not lean adds that piece's output to what is kept before it.
  auto unfreed = [&](size_t i, bool pending, PieceMode mode) {
    return pending && mode != PieceMode::Lean ? up(c.pieces[i - 1].output_bytes) : 0;
  };
  int W = 0;  // the most grid units any plan keeps: no index is ever clamped
  for (const PieceCost& p : c.pieces) {
    int most = 0;
    for (const PieceMode mode : kModes) most = std::max(most, up(p.kept_bytes(mode)));
    W += most + (p.lean_with_next ? up(p.output_bytes) : 0);
  }
  const double inf = std::numeric_limits<double>::infinity();
  // dp[s], s = 2w + f: least added time with w grid units kept by the
  // pieces so far, f = 1 where the last of them is lean_with_next and
  // lean (its output not yet counted: freed if this piece is lean too).
  // choice[i][s]: the mode of piece i on that best way to s (-1: none),
  // from[i][s] the f before it.
  const size_t S = 2 * (size_t(W) + 1);
  std::vector<double> dp(S, inf);
  std::vector<std::vector<signed char>> choice(n, std::vector<signed char>(S, -1));
  std::vector<std::vector<unsigned char>> from(n, std::vector<unsigned char>(S, 0));
  dp[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    const PieceCost& p = c.pieces[i];
    std::vector<double> next(S, inf);
    for (size_t s = 0; s < S; ++s) {
      if (dp[s] == inf) continue;
      const bool pending = s % 2 == 1;
      for (const PieceMode mode : kModes) {
        if (p.forced ? mode != *p.forced : (mode == PieceMode::Lean && !p.can_run_lean())) continue;
        const int w = int(s / 2) + unfreed(i, pending, mode);
        // this piece's backward holds the prefix, all its activations and the gradients so far
        if (double(w) * unit + double(own.at(i, mode)) > double(room)) continue;
        const size_t to =
            2 * size_t(w + up(p.kept_bytes(mode))) + (mode == PieceMode::Lean && p.lean_with_next ? 1 : 0);
        const double t = dp[s] + c.added_seconds(i, mode);
        if (t < next[to]) {
          next[to] = t;
          choice[i][to] = static_cast<signed char>(mode);
          from[i][to] = pending ? 1 : 0;
        }
      }
    }
    dp.swap(next);
  }
  // At the end of forward every piece's kept bytes are held at once (the
  // last one's output too where it is lean only with a next piece): with
  // alpha_kept below 0 that can exceed every backward's.
  auto held_at_end = [&](size_t s) { return s / 2 + (s % 2 == 1 ? size_t(up(c.pieces.back().output_bytes)) : 0); };
  size_t best = S;
  for (size_t s = 0; s < S; ++s)
    if (dp[s] < inf && double(held_at_end(s)) * unit <= double(room) && (best == S || dp[s] < dp[best])) best = s;
  if (best == S) return std::nullopt;
  // Walk back: the state before piece i follows from the choice at i.
  PlanModes modes(n);
  size_t s = best;
  for (size_t i = n; i-- > 0;) {
    const signed char k = choice[i][s];
    if (k < 0) return std::nullopt;
    const PieceMode mode = static_cast<PieceMode>(k);
    modes[i] = mode;
    const bool pending = from[i][s] == 1;
    s = 2 * size_t(int(s / 2) - up(c.pieces[i].kept_bytes(mode)) - unfreed(i, pending, mode)) + (pending ? 1 : 0);
  }
  return modes;
}

// A plan of the lowest predicted peak, found by bisecting the budget
// between `below` (that no plan fits on the grid) and the peak of
// `smallest` (smallest_plan's), down to the planner's grid. The two
// alphas differ (a recomputed piece's backward holds its rerun's
// activations and its own at once), so recomputing a piece can raise the
// peak, and smallest_plan's need not be the lowest.
PlanModes lowest_peak_plan(const CostModel& c, int64_t below, PlanModes smallest) {
  PlanModes plan = std::move(smallest);
  int64_t lo = below, hi = c.peak(plan);
  const auto unit = int64_t(std::ceil(grid_unit(c)));
  while (hi - lo > unit) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (const std::optional<PlanModes> fits = fastest_within(c, mid)) {
      plan = *fits;
      hi = std::min(mid, c.peak(plan));
    } else {
      lo = mid;
    }
  }
  return plan;
}

// Where the program found no plan within `budget`: the grid rounds what
// each piece keeps up, so smallest_plan, or the lowest-peak plan the
// bisection finds, can still fit; else the error.
PlanModes off_the_grid(const CostModel& c, int64_t budget) {
  const PlanModes smallest = smallest_plan(c);
  if (c.peak(smallest) <= budget) return smallest;
  PlanModes lowest = lowest_peak_plan(c, budget, smallest);
  if (c.peak(lowest) > budget)
    throw std::invalid_argument("memory budget of " + std::to_string(budget) + " bytes (" +
                                std::to_string(double(budget) / kGiB) +
                                " GiB) is below the smallest predicted step peak, " + std::to_string(c.peak(lowest)) +
                                " bytes (the lowest the planner finds of the plans the rules allow; with every "
                                "piece recomputed that a rule does not fix, an embed's input and its first "
                                "attention lean where that keeps less: " +
                                std::to_string(c.peak(smallest)) + " bytes)");
  return lowest;
}
}  // namespace

PlannedRecompute plan_for_budget(const CostModel& c, int64_t budget) {
  PlannedRecompute out;
  out.modes = c.all(PieceMode::Keep, true);
  if (c.peak(out.modes) > budget) {  // something (more) to recompute
    std::optional<PlanModes> fits = fastest_within(c, budget);
    out.modes = fits ? std::move(*fits) : off_the_grid(c, budget);
  }
  out.predicted_peak_bytes = c.peak(out.modes);
  out.added_seconds = c.added_seconds(out.modes);
  return out;
}

int next_piece_to_recompute(const CostModel& c, const PlanModes& modes) {
  // What piece i would free, recomputed instead of its present mode.
  auto frees = [&](size_t i) {
    PlanModes after = modes;
    after[i] = PieceMode::Recompute;
    int64_t kept = 0, kept_after = 0;
    for (size_t j = (i > 0 ? i - 1 : 0); j <= i; ++j) {  // the piece before keeps more where it was lean with i
      kept += c.kept_bytes(modes, j);
      kept_after += c.kept_bytes(after, j);
    }
    return std::max<int64_t>(0, kept - kept_after);
  };
  auto open = [&](size_t i) { return modes.at(i) != PieceMode::Recompute && !c.pieces[i].forced; };  // rules' stay
  int64_t left = 0;  // bytes the remaining pieces could still free
  for (size_t i = 0; i < c.pieces.size(); ++i)
    if (open(i)) left += frees(i);
  // First among pieces that free at least 1% of that (smaller ones would
  // not help), then among all.
  for (const bool filter : {true, false}) {
    int best = -1;
    double best_rate = -1;
    for (size_t i = 0; i < c.pieces.size(); ++i) {
      if (!open(i)) continue;
      if (filter && frees(i) * 100 < left) continue;
      const double cost = c.pieces[i].recompute_seconds() - c.added_seconds(i, modes.at(i));
      const double rate = double(frees(i)) / std::max(1e-9, cost);
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
