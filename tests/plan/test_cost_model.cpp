// The planner's cost model: the step peak it predicts for a plan, and its
// calibration from measured peaks and times. The planner's choices:
// test_memory_planner.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "made_up_costs.h"

namespace wg {
namespace {

using namespace wg::testing;

TEST(MemoryPlanner, PeakModel) {
  CostModel c;
  c.base_bytes = 100;
  c.pieces = {{key("a"), 50, 10, 1.0}, {key("b"), 40, 5, 2.0}};
  c.activations_none_bytes = 95;  // transient 5
  c.calibrate();
  EXPECT_EQ(c.transient, 5);
  EXPECT_EQ(c.peak({K, K}), 100 + 90 + 5);
  EXPECT_EQ(c.peak({R, K}), 100 + std::max<int64_t>(50, 10 + 40) + 5);
  EXPECT_EQ(c.peak({R, R}), 100 + 50 + 5);
  EXPECT_DOUBLE_EQ(c.added_seconds({R, R}), 3.0);
  c.pieces[1].rerun_share = 0.75;  // a recomputation leaves out a quarter of b's products
  EXPECT_DOUBLE_EQ(c.added_seconds({R, R}), 2.5);
  // A piece that cannot run lean is kept where a plan says lean.
  EXPECT_EQ(c.peak({L, K}), c.peak({K, K}));
  EXPECT_DOUBLE_EQ(c.added_seconds({L, L}), 0.0);
  // a keeps 30 of its 50 lean: its products' share and the 20 bytes it makes again
  c.pieces[0].lean_bytes = 30;
  c.pieces[0].lean_share = 0.1;
  c.lean_seconds_per_byte = 0.01;
  EXPECT_EQ(c.peak({L, K}), 100 + std::max<int64_t>(50, 30 + 40) + 5);
  EXPECT_DOUBLE_EQ(c.added_seconds({L, K}), 1.0 * 0.1 + 0.01 * 20);
  EXPECT_EQ(c.all(L), (PlanModes{L, K}));
  // Gradients: b's backward runs first and leaves 30 bytes of them, held
  // while a's runs (a's own 20 come at its end, as its activations go).
  c.pieces[0].gradient_bytes = 20;
  c.pieces[1].gradient_bytes = 300;
  EXPECT_EQ(c.peak({K, K}), 100 + std::max<int64_t>(50 + 300, 50 + 40) + 5);
  c.pieces[1].gradient_bytes = 30;
  EXPECT_EQ(c.peak({K, K}), 100 + std::max<int64_t>(50 + 30, 50 + 40) + 5);
  EXPECT_EQ(c.peak({R, K}), 100 + std::max<int64_t>(50 + 30, 10 + 40) + 5);
}

// The lean pieces' measured time, less what the FLOP count says their
// products take, is spread over the bytes they make again; never below 0.
TEST(MemoryPlanner, LeanCalibrationSpreadsTheMeasuredTimeOverTheBytesMadeAgain) {
  CostModel c;
  c.pieces = {{key("a"), 500, 100, 1.0}, {key("b"), 400, 50, 2.0}, {key("c"), 300, 60, 1.0}};
  c.pieces[0].lean_bytes = 300;  // makes 200 again
  c.pieces[1].lean_bytes = 100;  // 300
  c.pieces[1].lean_share = 0.1;  // its products: 0.2 s
  c.calibrate_lean(0.7);
  EXPECT_DOUBLE_EQ(c.lean_seconds_per_byte, 0.5 / 500);
  EXPECT_NEAR(c.added_seconds(c.all(L)), 0.7, 1e-12);
  EXPECT_DOUBLE_EQ(c.added_seconds(2, L), 0.0);  // c cannot run lean
  c.calibrate_lean(0.1);                         // less than the products: the bytes cost nothing
  EXPECT_EQ(c.lean_seconds_per_byte, 0.0);
}

TEST(MemoryPlanner, CalibrationReproducesBothMeasuredPeaks) {
  CostModel c;
  c.pieces = {{key("a"), 500, 100, 1.0}, {key("b"), 400, 50, 2.0}, {key("c"), 300, 60, 1.0}};
  c.activations_none_bytes = 1200 + 300 / 2 + 40;  // alpha 0.5 at the last piece, transient 40
  c.activations_all_bytes = 0 + 750 + 40;          // largest piece first: 1.5 x 500 + 40
  c.calibrate();
  EXPECT_NEAR(c.alpha, 0.5, 0.011);
  EXPECT_NEAR(double(c.peak({K, K, K})), 1390.0, 2.0);
  EXPECT_NEAR(double(c.peak({R, R, R})), 790.0, 6.0);
}

// With a lean probe, kept and lean pieces get their own alpha (from the
// peaks with nothing and with every piece lean), recomputed ones theirs
// (from the peak with everything recomputed): peaks made by the model with
// known values give them back.
TEST(MemoryPlanner, CalibrationWithALeanProbeReproducesAllThreePeaks) {
  for (const double kept : {0.25, -0.2}) {  // below 0: a backward that lets activations go before its peak
    CostModel c;
    c.pieces = {{key("a"), 500, 100, 1.0}, {key("b"), 400, 50, 2.0}, {key("c"), 300, 60, 1.0}};
    c.pieces[0].lean_bytes = 200;
    c.pieces[1].lean_bytes = 150;
    c.pieces[0].gradient_bytes = 70;
    c.pieces[2].gradient_bytes = 90;
    c.alpha = 0.75;
    c.alpha_kept = kept;
    c.transient = 40;
    c.activations_none_bytes = c.peak(c.all(K));
    c.activations_lean_bytes = c.peak(c.all(L));
    c.activations_all_bytes = c.peak(c.all(R));
    c.alpha = c.alpha_kept = 0;
    c.transient = 0;
    c.calibrate();
    if (kept > 0) EXPECT_NEAR(c.alpha_kept, kept, 0.011);  // below 0 the end of forward can bound the peak
    EXPECT_NEAR(c.alpha, 0.75, 0.011);
    EXPECT_NEAR(double(c.transient), 40.0, 6.0);
    EXPECT_NEAR(double(c.peak(c.all(L))), double(c.activations_lean_bytes), 6.0);
    EXPECT_NEAR(double(c.peak(c.all(R))), double(c.activations_all_bytes), 6.0);
  }
}

}  // namespace
}  // namespace wg
