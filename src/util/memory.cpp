// Counting CPU allocator and memory statistics (see header).
//
// Each allocation is over-allocated by one alignment unit in front; the
// size lives there, so the deleter knows what to subtract. data == context,
// so raw_allocate/raw_deleter keep working.
#include "wg/util/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <limits>

#include <c10/util/Exception.h>
#include <torch/version.h>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>

#ifdef WG_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace wg {
namespace {

constexpr size_t kHeader = c10::gAlignment;  // keeps the returned pointer aligned

struct Counters {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> limit{0};  // 0: none
};

Counters& counters() {
  static Counters c;  // process-wide by nature: c10 has one CPU allocator
  return c;
}

void counting_delete(void* ptr) {
  if (!ptr) return;
  char* base = static_cast<char*>(ptr) - kHeader;
  const int64_t n = *reinterpret_cast<int64_t*>(base);
  counters().current.fetch_sub(n, std::memory_order_relaxed);
  c10::free_cpu(base);
}

// LibTorch 2.3 made Allocator::allocate non-const and added copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define WG_ALLOCATE_CONST
#define WG_ALLOCATOR_COPY_DATA 1
#else
#define WG_ALLOCATE_CONST const
#define WG_ALLOCATOR_COPY_DATA 0
#endif

struct CountingAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) WG_ALLOCATE_CONST override {
    const int64_t limit = counters().limit.load(std::memory_order_relaxed);
    if (limit > 0 && counters().current.load(std::memory_order_relaxed) + int64_t(n) > limit)
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU memory limit: allocating ", n, " bytes would pass the limit of ",
                       limit, " bytes (", counters().current.load(), " in use)");
    char* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    *reinterpret_cast<int64_t*>(base) = static_cast<int64_t>(n);
    auto& c = counters();
    const int64_t now = c.current.fetch_add(int64_t(n), std::memory_order_relaxed) + int64_t(n);
    int64_t peak = c.peak.load(std::memory_order_relaxed);
    while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    void* data = base + kHeader;
    return {data, data, &counting_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counting_delete; }
#if WG_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
#endif
};

std::once_flag g_install_once;
std::atomic<bool> g_installed{false};

// The process's resident memory (/proc/self/statm): what it holds from the
// system, freed memory that malloc keeps included. (mallinfo2 would say the
// same of the heap, but walks every free chunk: 18 ms a call measured with
// 100,000 of them, too slow once a step.)
int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const bool ok = std::fscanf(f, "%lld %lld", &size, &resident) == 2;
  std::fclose(f);
  const long page = sysconf(_SC_PAGE_SIZE);
  return ok && page > 0 ? resident * page : 0;
}

int64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * page : 0;
}

}  // namespace

void install_counting_allocator() {
  std::call_once(g_install_once, [] {
    static CountingAllocator allocator;  // must outlive every tensor
    // Priority above the default (0) so later default registrations do not win.
    c10::SetCPUAllocator(&allocator, /*priority=*/10);
    g_installed = true;
  });
}

bool counting_allocator_installed() { return g_installed.load(); }

void set_cpu_memory_limit(int64_t bytes) { counters().limit.store(std::max<int64_t>(0, bytes)); }

MemorySnapshot memory_snapshot(const std::string& device) {
  MemorySnapshot s;
  if (device.rfind("cuda", 0) == 0) {
#ifdef WG_TORCH_CUDA
    const int index = device.size() > 5 ? std::stoi(device.substr(5)) : 0;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    // StatType::AGGREGATE, 0 in every LibTorch; the enum moved out of
    // c10::cuda::CUDACachingAllocator in 2.5.
    constexpr size_t all = 0;
    s.current_bytes = stats.allocated_bytes[all].current;
    s.peak_bytes = stats.allocated_bytes[all].peak;
    s.reserved_peak_bytes = stats.reserved_bytes[all].peak;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      s.capacity_bytes = int64_t(total_b);
      s.available_bytes = int64_t(free_b) + s.reserved_peak_bytes;
    }
    return s;
#else
    throw std::runtime_error("memory statistics for " + device + ": this build's LibTorch has no CUDA");
#endif
  }
  s.current_bytes = counters().current.load();
  s.peak_bytes = counters().peak.load();
  const int64_t held_bytes = resident_bytes();
  s.reserved_peak_bytes = std::max(s.peak_bytes, held_bytes);
  s.capacity_bytes = physical_memory();
  const long avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  s.available_bytes = (avail > 0 && page > 0 ? int64_t(avail) * page : 0) + std::max(s.current_bytes, held_bytes);
  return s;
}

bool keep_freed_cpu_memory(int64_t bytes) {
  if (bytes <= 0) return true;
  const int keep = int(std::min<int64_t>(bytes, std::numeric_limits<int>::max()));
  // glibc refuses an mmap threshold above half its heap size (32 MiB on 64-bit).
  bool mmap_set = false;
  for (int mib = 32; mib >= 4 && !mmap_set; mib /= 2) mmap_set = mallopt(M_MMAP_THRESHOLD, mib << 20) == 1;
  return mallopt(M_TRIM_THRESHOLD, keep) == 1 && mmap_set;
}

void reset_peak_memory(const std::string& device) {
  if (device.rfind("cuda", 0) == 0) {
#ifdef WG_TORCH_CUDA
    const int index = device.size() > 5 ? std::stoi(device.substr(5)) : 0;
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
#endif
    return;
  }
  counters().peak.store(counters().current.load());
}

}  // namespace wg
