// The planner: its choice is the fastest plan that fits (checked against
// every plan of kept, lean and recomputed pieces), fixed pieces stay fixed,
// and an impossible budget is a clear error. Its cost model: test_cost_model.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "made_up_costs.h"

namespace wg {
namespace {

using namespace wg::testing;

// Bytes a step of the planner's grid, rounded up (the program rounds each
// piece's kept bytes up by at most this).
int64_t grid_step(const CostModel& c) {
  int64_t total = 0;
  for (const PieceCost& piece : c.pieces) total += piece.retained_bytes;
  return total / kPlannerGrid + 1;
}

// The peak the planner's error names ("smallest predicted step peak, N"), if it names one.
std::optional<int64_t> named_peak(const std::string& error) {
  const std::string tag = "smallest predicted step peak, ";
  const size_t at = error.find(tag);
  if (at == std::string::npos) return std::nullopt;
  return std::stoll(error.substr(at + tag.size()));
}

// Every plan of n pieces, each kept, lean or recomputed (3^n).
std::vector<PlanModes> every_plan(int n) {
  std::vector<PlanModes> plans(1);
  for (int i = 0; i < n; ++i) {
    std::vector<PlanModes> longer;
    for (const PlanModes& p : plans)
      for (const PieceMode m : {K, L, R}) {
        longer.push_back(p);
        longer.back().push_back(m);
      }
    plans.swap(longer);
  }
  return plans;
}

TEST(MemoryPlanner, ChoosesTheFastestPlanThatFitsExhaustiveCheck) {
  const std::vector<PlanModes> plans = every_plan(8);
  // Calibrated alphas of 0, and a recomputed piece's backward holding more
  // than a kept one's (whose end of forward can then be the peak).
  for (const bool lean : {false, true})
    for (const bool alphas : {false, true})
      for (uint32_t seed = 1; seed <= 20; ++seed) {
        CostModel c = random_costs(seed, 8, lean);
        if (alphas) {
          c.alpha = 0.8;
          c.alpha_kept = -0.4;
        }
        const int64_t lo = c.peak(every(8, R)), hi = c.peak(every(8, K));
        for (double f : {0.05, 0.3, 0.6, 0.9}) {
          const int64_t budget = lo + int64_t(f * double(hi - lo));
          const PlannedRecompute p = plan_for_budget(c, budget);
          ASSERT_LE(p.predicted_peak_bytes, budget);
          ASSERT_EQ(p.predicted_peak_bytes, c.peak(p.modes));
          // Exact up to the byte grid (1/20000 of the total), which rounds
          // each piece's kept bytes up: at least as fast as every plan that
          // fits with a grid step per piece to spare.
          const int64_t spare = 8 * grid_step(c);
          double best = 1e30;
          for (const PlanModes& m : plans)
            if (c.peak(m) <= budget - spare) best = std::min(best, c.added_seconds(m));
          EXPECT_LE(p.added_seconds, best + 1e-12)
              << "seed " << seed << " f " << f << " lean " << lean << " alphas " << alphas;
          for (size_t i = 0; i < p.modes.size(); ++i)
            if (!c.pieces[i].can_run_lean()) EXPECT_NE(p.modes[i], L) << "piece " << i;
        }
      }
}

// Lean pieces that save bytes cheaply are chosen before recomputing:
// four pieces that keep 100 (10 of it output), 40 lean at 0.1 s, or
// recomputed at 1 s. A budget that lean everywhere meets is met lean.
TEST(MemoryPlanner, LeanBeforeRecomputationWhereItIsCheaper) {
  CostModel c;
  for (int i = 0; i < 4; ++i) {
    c.pieces.push_back({key("p" + std::to_string(i)), 100, 10, 1.0});
    c.pieces.back().lean_bytes = 40;
    c.pieces.back().lean_share = 0.1;
  }
  c.activations_none_bytes = 400;
  c.calibrate();
  // The last piece's backward runs first, before any other frees its
  // bytes: what it keeps does not move the peak, and it is kept.
  const PlannedRecompute p = plan_for_budget(c, c.peak(every(4, L)));
  EXPECT_EQ(p.modes, (PlanModes{L, L, L, K}));
  EXPECT_NEAR(p.added_seconds, 0.3, 1e-12);
  // Under that, one of the first three is recomputed (90 bytes before the last piece).
  const PlannedRecompute q = plan_for_budget(c, c.peak({R, L, L, L}));
  EXPECT_EQ(std::count(q.modes.begin(), q.modes.end(), R), 1);
  EXPECT_EQ(std::count(q.modes.begin(), q.modes.end(), L), 2);
  EXPECT_EQ(q.modes[3], K);
  EXPECT_NEAR(q.added_seconds, 1.2, 1e-12);
}

// A piece whose lean frees its output only with the next one lean (an
// embed's input before block 0's attention): lean alone, it keeps its
// output too. "in" keeps 100, 95 of it its output; lean with "next" lean,
// 5 (the 95 booked to it, freed), for nearly nothing. A budget that leaves
// 50 bytes before the last piece's backward.
TEST(MemoryPlanner, APieceLeanOnlyWithTheNextKeepsItsOutputAlone) {
  CostModel c;
  c.pieces = {{key("in"), 100, 95, 1.0}, {key("next"), 100, 10, 1.0}, {key("last"), 100, 10, 1.0}};
  c.pieces[0].lean_bytes = 5;
  c.pieces[0].lean_share = 0.01;
  c.pieces[0].lean_with_next = true;
  c.pieces[1].lean_bytes = 10;
  c.pieces[1].lean_share = 0.5;
  c.activations_none_bytes = 300;
  c.calibrate();
  EXPECT_EQ(c.kept_bytes({L, L, K}, 0), 5);
  EXPECT_EQ(c.kept_bytes({L, R, K}, 0), 100);  // alone: its output as well
  EXPECT_EQ(c.kept_bytes({L, K, K}, 0), 100);
  EXPECT_EQ(c.peak({L, R, K}), c.peak({K, R, K}));
  const int64_t budget = c.base_bytes + 50 + 100 + c.transient;
  PlannedRecompute p = plan_for_budget(c, budget);
  EXPECT_EQ(p.modes, (PlanModes{L, L, K}));  // 0.51 s
  EXPECT_LE(p.predicted_peak_bytes, budget);
  // "next" cannot run lean: nothing fits 50 (the input keeps 95 at least).
  c.pieces[1].lean_bytes = -1;
  EXPECT_THROW(plan_for_budget(c, budget), std::invalid_argument);
  // With room for the input's output: "in" kept, not lean alone (the same bytes, more time).
  p = plan_for_budget(c, c.peak({K, R, K}));
  EXPECT_EQ(p.modes, (PlanModes{K, R, K}));
  // A rule that fixes "in" lean and "next" recomputed: planned as it is, its output counted.
  c.pieces[1].lean_bytes = 10;
  c.pieces[0].forced = L;
  c.pieces[1].forced = R;
  p = plan_for_budget(c, c.peak({L, R, K}));
  EXPECT_EQ(p.modes, (PlanModes{L, R, K}));
  EXPECT_EQ(p.predicted_peak_bytes, c.peak({L, R, K}));
}

// The planner's last resort: every piece recomputed that no rule fixes,
// but an embed's input and the next piece lean where that keeps less (the
// input's output made again: 5 kept instead of 95, and 10 instead of 100).
TEST(MemoryPlanner, TheSmallestPlanTakesTheLeanPairWhereItKeepsLess) {
  CostModel c;
  c.pieces = {{key("in"), 100, 95, 1.0}, {key("next"), 100, 10, 1.0}, {key("last"), 100, 10, 1.0}};
  c.pieces[0].lean_bytes = 5;
  c.pieces[0].lean_with_next = true;
  c.pieces[1].lean_bytes = 10;
  c.activations_none_bytes = 300;
  c.calibrate();
  EXPECT_EQ(smallest_plan(c), (PlanModes{L, L, R}));
  EXPECT_LT(c.peak({L, L, R}), c.peak(every(3, R)));
  // Lean where "next" keeps more than recomputed: the pair keeps 5 + 60 against 95 + 10.
  c.pieces[1].lean_bytes = 60;
  EXPECT_EQ(smallest_plan(c), (PlanModes{L, L, R}));
  // ... and 5 + 100 against 105: recomputed.
  c.pieces[1].lean_bytes = 100;
  EXPECT_EQ(smallest_plan(c), every(3, R));
  // "next" cannot run lean, or a rule fixes one of the pair: no pair.
  c.pieces[1].lean_bytes = -1;
  EXPECT_EQ(smallest_plan(c), every(3, R));
  c.pieces[1].lean_bytes = 10;
  c.pieces[1].forced = K;
  EXPECT_EQ(smallest_plan(c), (PlanModes{R, K, R}));
  c.pieces[1].forced.reset();
  c.pieces[0].forced = R;
  EXPECT_EQ(smallest_plan(c), every(3, R));
  // The planner's error names the smallest plan's peak.
  c.pieces[0].forced.reset();
  try {
    plan_for_budget(c, c.peak({L, L, R}) - 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("smallest predicted step peak, " + std::to_string(c.peak({L, L, R}))),
              std::string::npos)
        << e.what();
  }
}

TEST(MemoryPlanner, NothingRecomputedWhenEverythingFits) {
  const CostModel c = random_costs(3, 8);
  const PlannedRecompute p = plan_for_budget(c, c.peak(every(8, K)));
  EXPECT_EQ(p.added_seconds, 0.0);
  EXPECT_EQ(p.modes, every(8, K));
}

TEST(MemoryPlanner, BudgetBelowTheAllRecomputePeakIsAClearError) {
  const CostModel c = random_costs(4, 8);
  const int64_t lo = c.peak(every(8, R));
  try {
    plan_for_budget(c, lo - 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("memory budget of " + std::to_string(lo - 1) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("smallest predicted step peak, " + std::to_string(lo)), std::string::npos) << m;
  }
}

// Where a recomputed piece's backward holds more than a kept one's (alpha
// 1 against alpha_kept -0.5), recomputing can raise the peak: two pieces
// that keep 100 (10 of it output) peak at 210 both recomputed, 200 both
// kept or with the first recomputed. A budget of 205 is met, as it is
// where only the second of these fits.
TEST(MemoryPlanner, ABudgetUnderTheSmallestPlansPeakIsMetWhereAPlanFits) {
  CostModel c;
  c.pieces = {{key("a"), 100, 10, 1.0}, {key("b"), 100, 10, 1.0}};
  c.alpha = 1.0;
  c.alpha_kept = -0.5;
  EXPECT_EQ(c.peak(every(2, R)), 210);
  EXPECT_EQ(c.peak({R, K}), 200);
  EXPECT_EQ(c.peak(every(2, K)), 200);
  EXPECT_EQ(plan_for_budget(c, 205).modes, every(2, K));
  // With b keeping 150, both kept peak at 250 and both recomputed at 310:
  // only the first recomputed fits (200).
  c.pieces[1].retained_bytes = 150;
  EXPECT_EQ(c.peak(every(2, K)), 250);
  EXPECT_EQ(c.peak(every(2, R)), 310);
  EXPECT_EQ(smallest_plan(c), every(2, R));
  const PlannedRecompute p = plan_for_budget(c, 205);
  EXPECT_EQ(p.modes, (PlanModes{R, K}));
  EXPECT_EQ(p.predicted_peak_bytes, c.peak(p.modes));
}

// Over random costs with those alphas, every budget some plan meets (with
// the grid's rounding to spare) is met, and under the lowest peak of any
// plan the error names that peak, not the higher one of smallest_plan.
TEST(MemoryPlanner, TheErrorNamesTheLowestPeakOfAnyPlan) {
  const std::vector<PlanModes> plans = every_plan(6);
  int below_smallest = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    CostModel c = random_costs(seed, 6, true);
    c.alpha = 1.0;
    c.alpha_kept = -0.3;
    int64_t lowest = std::numeric_limits<int64_t>::max();
    for (const PlanModes& m : plans) {
      bool allowed = true;
      for (size_t i = 0; i < m.size(); ++i) allowed = allowed && (m[i] != L || c.pieces[i].can_run_lean());
      if (allowed) lowest = std::min(lowest, c.peak(m));
    }
    if (lowest < c.peak(smallest_plan(c))) ++below_smallest;
    const int64_t spare = 6 * grid_step(c);
    const PlannedRecompute p = plan_for_budget(c, lowest + spare);
    EXPECT_LE(p.predicted_peak_bytes, lowest + spare) << "seed " << seed;
    // At the lowest peak itself, inside the grid's rounding: met, or
    // refused naming a peak within that rounding.
    try {
      EXPECT_LE(plan_for_budget(c, lowest).predicted_peak_bytes, lowest) << "seed " << seed;
    } catch (const std::invalid_argument& e) {
      const std::optional<int64_t> named = named_peak(e.what());
      ASSERT_TRUE(named) << e.what();
      EXPECT_LE(*named, lowest + spare) << "seed " << seed << ": " << e.what();
    }
    try {
      plan_for_budget(c, lowest - 1);
      ADD_FAILURE() << "seed " << seed << ": a budget under every plan's peak was taken";
    } catch (const std::invalid_argument& e) {
      const std::optional<int64_t> named = named_peak(e.what());
      ASSERT_TRUE(named) << e.what();
      EXPECT_GE(*named, lowest) << "seed " << seed << ": " << e.what();
      EXPECT_LE(*named, lowest + spare) << "seed " << seed << ": " << e.what();
    }
  }
  EXPECT_GT(below_smallest, 0);  // the case this test is for occurs
}

// The grid's rounding alone stands between a budget and the lowest plan
// (two pieces whose kept bytes are no multiple of the grid's step; the
// lowest plan, a recomputed then b kept, peaks at the end of the forward):
// the budget of exactly that peak is met.
TEST(MemoryPlanner, ABudgetOfExactlyTheLowestPeakIsMet) {
  CostModel c;
  c.pieces = {{key("a"), 82501224, 14361530, 1.0}, {key("b"), 153065404, 11344631, 1.0}};
  c.alpha = 1.0;
  c.alpha_kept = -0.5;
  const int64_t lowest = c.peak({R, K});
  EXPECT_LT(lowest, c.peak(every(2, R)));
  EXPECT_LT(lowest, c.peak(every(2, K)));
  const PlannedRecompute p = plan_for_budget(c, lowest);
  EXPECT_EQ(p.modes, (PlanModes{R, K}));
  EXPECT_EQ(p.predicted_peak_bytes, lowest);
  EXPECT_THROW(plan_for_budget(c, lowest - 1), std::invalid_argument);
}

// A last piece lean only with a next one keeps its output too, which with
// alpha_kept below 0 sets the peak at the end of the forward: "b" keeps
// 100, 90 of it output, 5 lean with a next piece (there is none), so 95
// lean. Kept then lean peaks at 195, and no plan under it.
TEST(MemoryPlanner, ALastPieceLeanOnlyWithANextKeepsItsOutputAtTheEnd) {
  CostModel c;
  c.pieces = {{key("a"), 100, 10, 1.0}, {key("b"), 100, 90, 1.0}};
  c.pieces[1].lean_bytes = 5;
  c.pieces[1].lean_share = 0.01;
  c.pieces[1].lean_with_next = true;
  c.alpha = 1.0;
  c.alpha_kept = -0.5;
  EXPECT_EQ(c.kept_bytes({K, L}, 1), 95);
  EXPECT_EQ(c.peak({K, L}), 195);
  EXPECT_THROW(plan_for_budget(c, 194), std::invalid_argument);
  const PlannedRecompute p = plan_for_budget(c, 196);
  EXPECT_EQ(p.modes, (PlanModes{K, L}));
  EXPECT_EQ(p.predicted_peak_bytes, 195);
}

TEST(MemoryPlanner, FixedPiecesStayFixed) {
  CostModel c = random_costs(5, 8, true);
  ASSERT_TRUE(c.pieces[3].can_run_lean());
  c.pieces[0].forced = R;
  c.pieces[1].forced = K;
  c.pieces[3].forced = L;
  const int64_t hi = c.peak(every(8, K));
  const PlannedRecompute p = plan_for_budget(c, hi);  // would otherwise recompute nothing
  EXPECT_EQ(p.modes[0], R);
  EXPECT_EQ(p.modes[1], K);
  EXPECT_EQ(p.modes[3], L);
  PlanModes on = every(8, R);
  on[1] = K;
  on[3] = L;
  EXPECT_EQ(c.all(R, true), on);
  const PlannedRecompute tight = plan_for_budget(c, c.peak(on));  // the smallest peak the rules allow
  EXPECT_EQ(tight.modes[0], R);
  EXPECT_EQ(tight.modes[1], K);
  EXPECT_EQ(tight.modes[3], L);
  EXPECT_LE(tight.predicted_peak_bytes, c.peak(on));
  EXPECT_EQ(next_piece_to_recompute(c, on), -1);  // all others recomputed, pieces 1 and 3 fixed
}

TEST(MemoryPlanner, NextPieceFreesTheMostBytesPerSecond) {
  CostModel c;
  c.pieces = {{key("slow"), 1000, 0, 1.0}, {key("fast"), 800, 0, 0.1}, {key("tiny"), 10, 0, 0.0001}};
  EXPECT_EQ(next_piece_to_recompute(c, {K, K, K}), 1);  // "tiny" frees under 1%
  EXPECT_EQ(next_piece_to_recompute(c, {K, R, K}), 0);
  EXPECT_EQ(next_piece_to_recompute(c, {R, R, K}), 2);  // the last one left
  EXPECT_EQ(next_piece_to_recompute(c, {R, R, R}), -1);
  // Lean, "fast" keeps 50 of its 800: recomputed, it frees those 50 for
  // its recompute time less its lean time. Lean at no cost, that is 500
  // bytes a second, and "slow" frees 1000 a second; lean at 0.09 s, 5000.
  c.pieces[1].lean_bytes = 50;
  EXPECT_EQ(next_piece_to_recompute(c, {K, L, K}), 0);
  c.pieces[1].lean_share = 0.9;
  EXPECT_EQ(next_piece_to_recompute(c, {K, L, K}), 1);
}

// The planner over the real model's pieces (all seven sections, the
// adapter's and decoder's cross-attention among them): attention keeps four
// times an MLP's bytes and costs half its time, so it goes first.
TEST(MemoryPlanner, PlansOverTheModelsPieces) {
  Config cfg;
  StreamConfig s;
  s.name = "ERA5";
  s.embed.num_blocks = 1;
  s.target_readout.num_layers = 2;
  cfg.streams = {s};
  cfg.ae_local_num_blocks = 1;
  cfg.ae_aggregation_num_blocks = 1;
  cfg.ae_global_num_blocks = 2;
  cfg.forecast_policy = "fixed";
  cfg.fe_num_blocks = 1;
  const std::vector<PieceKey> pieces = model_pieces(cfg);
  CostModel c;
  c.base_bytes = 1 << 20;
  int64_t all = 0;
  for (const auto& k : pieces) {
    PieceCost p;
    p.key = k;
    p.output_bytes = 1000;
    p.retained_bytes = k.is_attention() ? 40000 : 10000;
    p.forward_seconds = k.is_attention() ? 0.005 : 0.01;
    all += p.retained_bytes;
    c.pieces.push_back(p);
  }
  c.activations_none_bytes = all;
  c.calibrate();
  PlanModes none(pieces.size(), K), attention(pieces.size(), K);
  for (size_t i = 0; i < pieces.size(); ++i) attention[i] = pieces[i].is_attention() ? R : K;
  // Out of memory with nothing recomputed: the first attention piece in forward order.
  const int first = next_piece_to_recompute(c, none);
  ASSERT_GE(first, 0);
  EXPECT_EQ(pieces[size_t(first)].str(), "embed.ERA5/block0.attn");
  // With every attention piece recomputed, an MLP or an input/readout/head follows.
  const int next = next_piece_to_recompute(c, attention);
  ASSERT_GE(next, 0);
  EXPECT_FALSE(pieces[size_t(next)].is_attention());
  // A budget that recomputing every attention piece meets (with room for
  // the planner's byte grid, which rounds kept bytes up): the planner's plan
  // fits and costs no more time than that one.
  const int64_t budget = c.peak(attention) + all / kPlannerGrid * int64_t(pieces.size() + 1);
  const PlannedRecompute plan = plan_for_budget(c, budget);
  ASSERT_EQ(plan.modes.size(), pieces.size());
  EXPECT_LE(plan.predicted_peak_bytes, budget);
  EXPECT_LE(plan.added_seconds, c.added_seconds(attention) + 1e-12);
  EXPECT_GT(plan.added_seconds, 0.0);
  // The choice maps onto the model's plan by position.
  RecomputePlan rp(pieces);
  for (size_t i = 0; i < pieces.size(); ++i) rp.set_mode(i, plan.modes[i]);
  EXPECT_EQ(rp.pieces_recomputed(), int(std::count(plan.modes.begin(), plan.modes.end(), R)));
  bool cross_seen = false;
  for (const auto& k : pieces) cross_seen = cross_seen || k.kind == PieceKind::CrossAttention;
  EXPECT_TRUE(cross_seen);
}

}  // namespace
}  // namespace wg
