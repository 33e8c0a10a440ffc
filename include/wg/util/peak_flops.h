// The peak a rank's model FLOP/s are measured against (MFU). Configured
// (peak_tflops), or detected: a known GPU's dense peak in the training
// dtype (its data sheet), else the rate of a matrix product measured on the
// rank's device and threads (for a CPU, the number its MFU means:
// "share of what this machine's sgemm does").
#pragma once

#include <string>

namespace wg {

struct PeakFlops {
  double flops = 0;    // per second
  std::string source;  // "configured", "data sheet: NVIDIA H100 bf16", "measured: 1024^3 sgemm, 2 threads"
};

// device: "cpu" or "cuda:N"; gpu_name: the GPU's name ("NVIDIA H200"; "" for a CPU); bf16: mixed
// precision (a GPU's bf16 peak, else its fp32 one).
PeakFlops peak_flops(double configured_tflops, const std::string& device, const std::string& gpu_name, bool bf16);

// The rate of n x n x n matrix products in float32 (bf16: bfloat16) on the
// device: the best of at least `repeats` after a warm-up, repeated until
// min_seconds have passed, so that an idle core's clock has come up.
double measured_matmul_flops(const std::string& device, int n, int repeats, bool bf16, double min_seconds = 0.3);

}  // namespace wg
