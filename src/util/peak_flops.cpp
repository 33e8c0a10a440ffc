// Peak FLOP/s (see header).
#include "wg/util/peak_flops.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

namespace wg {

namespace {
// Dense (no sparsity) peaks from NVIDIA's data sheets, TFLOP/s: bf16 tensor
// cores, and what float32 matrix products get without autocast (TF32 off:
// LibTorch's default for matmul). The first entry whose text the GPU's
// name contains is taken, so a variant comes before its family: the H100
// PCIe ("NVIDIA H100 PCIe") and NVL cards have lower clocks than the SXM
// ("NVIDIA H100 80GB HBM3").
struct KnownGpu {
  const char* name_part;
  double bf16, fp32;
};
constexpr KnownGpu kKnownGpus[] = {
    {"GH200", 989.4, 66.9}, {"H200", 989.4, 66.9}, {"H100 PCIe", 756.5, 51.2}, {"H100 NVL", 835.5, 60.0},
    {"H100", 989.4, 66.9},  {"A100", 312.0, 19.5}, {"B200", 2250.0, 80.0},     {"L40S", 362.1, 91.6},
};
}  // namespace

double measured_matmul_flops(const std::string& device, int n, int repeats, bool bf16, double min_seconds) {
  const torch::Device dev(device);
  const auto opts = torch::TensorOptions().device(dev).dtype(bf16 ? torch::kBFloat16 : torch::kFloat32);
  const torch::Tensor a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  torch::Tensor c = torch::mm(a, b);  // warm-up
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double best = 1e30;
  // At least `repeats`, and on until min_seconds have passed: a core that
  // was idle runs its first products below its clock (a 1024^3 sgemm
  // takes about 7 ms on 2 cores; 3 of them once measured 144 GFLOP/s
  // against 300 a moment later).
  for (int r = 0;; ++r) {
    if (r >= repeats && std::chrono::duration<double>(Clock::now() - start).count() >= min_seconds) break;
    if (dev.is_cuda()) torch::cuda::synchronize(dev.index());
    const auto t0 = Clock::now();
    c = torch::mm(a, b);
    if (dev.is_cuda()) torch::cuda::synchronize(dev.index());
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * double(n) * double(n) * double(n) / best;
}

PeakFlops peak_flops(double configured_tflops, const std::string& device, const std::string& gpu_name, bool bf16) {
  if (configured_tflops > 0) return {configured_tflops * 1e12, "configured (peak_tflops)"};
  const torch::Device dev(device);
  const bool on_gpu = dev.is_cuda();
  if (on_gpu) {
    for (const KnownGpu& g : kKnownGpus)
      if (gpu_name.find(g.name_part) != std::string::npos)
        return {(bf16 ? g.bf16 : g.fp32) * 1e12, "data sheet: " + gpu_name + (bf16 ? " bf16" : " fp32")};
  }
  const int n = on_gpu ? 8192 : 1024;
  const double measured = measured_matmul_flops(device, n, on_gpu ? 10 : 3, on_gpu && bf16);
  return {measured, "measured: " + std::to_string(n) + "^3 " + (on_gpu && bf16 ? "bf16" : "fp32") + " matmul, " +
                        std::to_string(at::get_num_threads()) + " thread(s)"};
}

}  // namespace wg
