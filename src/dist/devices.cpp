// CUDA device discovery (see header). Without the CUDA toolkit at build
// time, there are no devices.
#include "wg/dist/devices.h"

#ifdef WG_WITH_CUDA_RUNTIME
#include <cuda_runtime_api.h>
#endif

namespace wg {

int cuda_device_count() {
#ifdef WG_WITH_CUDA_RUNTIME
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
#else
  return 0;
#endif
}

int device_for_local_rank(int local_rank, int device_count) {
  if (device_count <= 1) return 0;
  return local_rank % device_count;
}

int64_t cuda_device_memory(int device) {
#ifdef WG_WITH_CUDA_RUNTIME
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return 0;
  return int64_t(prop.totalGlobalMem);
#else
  (void)device;
  return 0;
#endif
}

std::string cuda_device_name(int device) {
#ifdef WG_WITH_CUDA_RUNTIME
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  return prop.name;
#else
  (void)device;
  return "";
#endif
}

}  // namespace wg
