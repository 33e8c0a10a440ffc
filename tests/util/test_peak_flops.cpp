// The peak a rank's MFU is measured against (src/util/peak_flops.cpp): a
// configured peak as given; a known GPU's data-sheet peak, the variant's
// where a card has several; else the matrix product measured for long
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

// Looked up by name alone (no CUDA call), so it runs on a machine without a GPU.
TEST(PeakFlops, KnownGpusTakeTheirVariantsDataSheetPeak) {
  const struct {
    const char* name;
    bool bf16;
    double tflops;
  } cases[] = {
      {"NVIDIA H100 80GB HBM3", true, 989.4}, {"NVIDIA H100 PCIe", true, 756.5},
      {"NVIDIA H100 NVL", true, 835.5},       {"NVIDIA H100 PCIe", false, 51.2},
      {"NVIDIA H200", true, 989.4},           {"NVIDIA GH200 480GB", true, 989.4},
      {"NVIDIA A100-SXM4-80GB", true, 312.0}, {"NVIDIA A100 80GB PCIe", false, 19.5},
  };
  for (const auto& c : cases) {
    const PeakFlops p = peak_flops(0, "cuda:0", c.name, c.bf16);
    EXPECT_DOUBLE_EQ(p.flops, c.tflops * 1e12) << c.name;
    EXPECT_EQ(p.source, std::string("data sheet: ") + c.name + (c.bf16 ? " bf16" : " fp32")) << c.name;
  }
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
