// The CPU set-up of a rank (src/util/memory.cpp, threads.cpp): freed memory
// kept for the next step and reported as reserved; BLAS threads that follow
// the BLAS build.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <torch/torch.h>

#include <string>

#include "wg/util/memory.h"
#include "wg/util/threads.h"

namespace wg {
namespace {

TEST(CpuMemory, FreedMemoryIsKeptForTheNextStepAndCountedAsReserved) {
  ASSERT_TRUE(keep_freed_cpu_memory(int64_t(256) << 20));
  install_counting_allocator();
  {
    auto t = torch::ones({int64_t(6) << 20}, torch::kFloat);  // 24 MiB: below the 32 MiB mmap threshold
    EXPECT_EQ(t.sum().item<float>(), float(6 << 20));
  }
  // Freed, and kept in malloc's arenas rather than returned to the system.
  const struct mallinfo2 m = mallinfo2();
  EXPECT_GE(int64_t(m.fordblks), int64_t(20) << 20) << "free bytes kept: " << m.fordblks;
  const MemorySnapshot s = memory_snapshot("cpu");
  EXPECT_GE(s.reserved_peak_bytes, s.peak_bytes);
  EXPECT_GE(s.reserved_peak_bytes, int64_t(24) << 20);  // resident: the kept block is still there
  EXPECT_TRUE(keep_freed_cpu_memory(0));  // 0: glibc's defaults, nothing to set
}

TEST(CpuThreads, BlasGetsTheRanksThreadsOnlyWhenItSharesLibTorchsPool) {
  ASSERT_EQ(set_compute_threads(2), 2);
  EXPECT_EQ(at::get_num_threads(), 2);
  const std::string kind = blas_kind();
  EXPECT_EQ(blas_threads(), kind == "openblas-openmp" ? 2 : 1) << kind;
  set_compute_threads(1);
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(blas_threads(), 1);
}

}  // namespace
}  // namespace wg
