// CUDA devices as seen by this process, without LibTorch: count (0 when no
// driver or GPU: cudaGetDeviceCount's error is checked, never trusted), the
// device a local rank should use, and a device's memory.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

int cuda_device_count();
// Local rank -> device; when the scheduler shows each rank only its own
// GPU (one visible device), that is device 0.
int device_for_local_rank(int local_rank, int device_count);
int64_t cuda_device_memory(int device);  // 0 when unknown
std::string cuda_device_name(int device);  // "NVIDIA H200"; "" when unknown

}  // namespace wg
