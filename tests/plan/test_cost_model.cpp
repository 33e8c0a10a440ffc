// The planner: its choice is the fastest plan that fits (checked against
// every subset), fixed pieces stay fixed, and an impossible budget is a
// clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "wg/plan/cost_model.h"
#include "wg/plan/recompute_plan.h"

namespace wg {
namespace {

// A piece of its own section, for costs made up in a test.
PieceKey key(const std::string& name) { return PieceKey::io(name, "", PieceKind::Input); }

CostModel random_costs(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  CostModel c;
  c.base_bytes = 1000000;
  int64_t all = 0;
  for (int i = 0; i < n; ++i) {
    PieceCost p;
    p.key = key("p" + std::to_string(i));
    p.output_bytes = 1000 + rng() % 20000;
    p.retained_bytes = p.output_bytes + rng() % 200000;
    p.forward_seconds = 1e-4 * (1 + rng() % 100);
    all += p.retained_bytes;
    c.pieces.push_back(p);
  }
  c.activations_none_bytes = all + 50000;  // some transient
  c.calibrate();
  return c;
}

TEST(MemoryPlanner, PeakModel) {
  CostModel c;
  c.base_bytes = 100;
  c.pieces = {{key("a"), 50, 10, 1.0}, {key("b"), 40, 5, 2.0}};
  c.activations_none_bytes = 95;  // transient 5
  c.calibrate();
  EXPECT_EQ(c.transient, 5);
  EXPECT_EQ(c.peak({false, false}), 100 + 90 + 5);
  EXPECT_EQ(c.peak({true, false}), 100 + std::max<int64_t>(50, 10 + 40) + 5);
  EXPECT_EQ(c.peak({true, true}), 100 + 50 + 5);
  EXPECT_DOUBLE_EQ(c.added_seconds({true, true}), 3.0);
  c.pieces[1].rerun_share = 0.75;  // a recomputation leaves out a quarter of b's products
  EXPECT_DOUBLE_EQ(c.added_seconds({true, true}), 2.5);
}

TEST(MemoryPlanner, CalibrationReproducesBothMeasuredPeaks) {
  CostModel c;
  c.pieces = {{key("a"), 500, 100, 1.0}, {key("b"), 400, 50, 2.0}, {key("c"), 300, 60, 1.0}};
  c.activations_none_bytes = 1200 + 300 / 2 + 40;  // alpha 0.5 at the last piece, transient 40
  c.activations_all_bytes = 0 + 750 + 40;          // largest piece first: 1.5 x 500 + 40
  c.calibrate();
  EXPECT_NEAR(c.alpha, 0.5, 0.011);
  EXPECT_NEAR(double(c.peak({false, false, false})), 1390.0, 2.0);
  EXPECT_NEAR(double(c.peak({true, true, true})), 790.0, 6.0);
}

TEST(MemoryPlanner, ChoosesTheFastestPlanThatFitsExhaustiveCheck) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const CostModel c = random_costs(seed, 10);
    const int64_t lo = c.peak(std::vector<bool>(10, true)), hi = c.peak(std::vector<bool>(10, false));
    for (double f : {0.05, 0.3, 0.6, 0.9}) {
      const int64_t budget = lo + int64_t(f * double(hi - lo));
      const PlannedRecompute p = plan_for_budget(c, budget);
      ASSERT_LE(p.predicted_peak_bytes, budget);
      double best = 1e30;
      for (int mask = 0; mask < (1 << 10); ++mask) {
        std::vector<bool> on(10);
        for (int i = 0; i < 10; ++i) on[i] = (mask >> i) & 1;
        if (c.peak(on) <= budget) best = std::min(best, c.added_seconds(on));
      }
      // exact up to the byte grid (1/20000 of the total): allow a hair
      EXPECT_LE(p.added_seconds, best * 1.0001 + 1e-12) << "seed " << seed << " f " << f;
    }
  }
}

TEST(MemoryPlanner, NothingRecomputedWhenEverythingFits) {
  const CostModel c = random_costs(3, 8);
  const PlannedRecompute p = plan_for_budget(c, c.peak(std::vector<bool>(8, false)));
  EXPECT_EQ(p.added_seconds, 0.0);
}

TEST(MemoryPlanner, BudgetBelowTheAllRecomputePeakIsAClearError) {
  const CostModel c = random_costs(4, 8);
  const int64_t lo = c.peak(std::vector<bool>(8, true));
  try {
    plan_for_budget(c, lo - 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("memory budget of " + std::to_string(lo - 1) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("smallest predicted step peak, " + std::to_string(lo)), std::string::npos) << m;
  }
}

TEST(MemoryPlanner, FixedPiecesStayFixed) {
  CostModel c = random_costs(5, 8);
  c.pieces[0].forced = 1;
  c.pieces[1].forced = 0;
  const int64_t hi = c.peak(std::vector<bool>(8, false));
  const PlannedRecompute p = plan_for_budget(c, hi);  // would otherwise recompute nothing
  EXPECT_TRUE(p.recompute[0]);
  EXPECT_FALSE(p.recompute[1]);
  std::vector<bool> on(8, true);
  on[1] = false;
  const PlannedRecompute tight = plan_for_budget(c, c.peak(on));
  EXPECT_FALSE(tight.recompute[1]);
  EXPECT_EQ(next_piece_to_recompute(c, tight.recompute), -1);  // all others on, piece 1 fixed off
}

TEST(MemoryPlanner, NextPieceFreesTheMostBytesPerSecond) {
  CostModel c;
  c.pieces = {{key("slow"), 1000, 0, 1.0}, {key("fast"), 800, 0, 0.1}, {key("tiny"), 10, 0, 0.0001}};
  EXPECT_EQ(next_piece_to_recompute(c, {false, false, false}), 1);  // "tiny" frees under 1%
  EXPECT_EQ(next_piece_to_recompute(c, {false, true, false}), 0);
  EXPECT_EQ(next_piece_to_recompute(c, {true, true, false}), 2);   // the last one left
  EXPECT_EQ(next_piece_to_recompute(c, {true, true, true}), -1);
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
  std::vector<bool> none(pieces.size(), false), attention(pieces.size(), false);
  for (size_t i = 0; i < pieces.size(); ++i) attention[i] = pieces[i].is_attention();
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
  ASSERT_EQ(plan.recompute.size(), pieces.size());
  EXPECT_LE(plan.predicted_peak_bytes, budget);
  EXPECT_LE(plan.added_seconds, c.added_seconds(attention) + 1e-12);
  EXPECT_GT(plan.added_seconds, 0.0);
  // The choice maps onto the model's plan by position.
  RecomputePlan rp(pieces);
  for (size_t i = 0; i < pieces.size(); ++i) rp.set(i, plan.recompute[i]);
  EXPECT_EQ(rp.pieces_recomputed(), int(std::count(plan.recompute.begin(), plan.recompute.end(), true)));
  bool cross_seen = false;
  for (const auto& k : pieces) cross_seen = cross_seen || k.kind == PieceKind::CrossAttention;
  EXPECT_TRUE(cross_seen);
}

}  // namespace
}  // namespace wg
