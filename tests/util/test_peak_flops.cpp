// The peak a CPU rank's MFU is measured against (src/util/peak_flops.cpp):
// a configured peak as given, else the matrix product measured for long
// enough that an idle core's clock has come up.
#include <gtest/gtest.h>

#include <chrono>

#include "wg/util/peak_flops.h"

namespace wg {
namespace {

TEST(PeakFlops, ConfiguredPeakIsTakenAsGiven) {
  const PeakFlops p = peak_flops(12.5, "cpu", "", false);
  EXPECT_EQ(p.flops, 12.5e12);
  EXPECT_EQ(p.source, "configured (peak_tflops)");
}

TEST(PeakFlops, MeasuredProductRunsForItsMinimumTime) {
  for (const int n : {16, 128}) {
    const auto t0 = std::chrono::steady_clock::now();
    const double rate = measured_matmul_flops("cpu", n, 1, false, 0.15);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(seconds, 0.15) << n;
    EXPECT_LT(seconds, 5.0) << n;
    EXPECT_GT(rate, 1e6) << n;
  }
}

TEST(PeakFlops, MeasuredPeakNamesWhatItMeasured) {
  const PeakFlops p = peak_flops(0, "cpu", "", false);
  EXPECT_GT(p.flops, 1e8);
  EXPECT_NE(p.source.find("measured: 1024^3 fp32 matmul"), std::string::npos) << p.source;
}

}  // namespace
}  // namespace wg
