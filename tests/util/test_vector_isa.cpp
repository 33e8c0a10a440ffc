// The CPU's vector instruction set (wg/util/vector_isa.h): what it names
// matches the CPU's features, and by_vector_isa hands back the build for
// that set, the baseline's where the CPU has neither wider one.
#include "wg/util/vector_isa.h"

#include <gtest/gtest.h>

namespace wg {
namespace {

int built_for_avx512() { return 512; }
int built_for_avx2() { return 2; }
int built_for_base() { return 0; }

TEST(VectorIsa, NamesWhatTheCpuRuns) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  EXPECT_EQ(vector_isa(), avx512 ? VectorIsa::Avx512 : avx2 ? VectorIsa::Avx2 : VectorIsa::Base);
  EXPECT_EQ(vector_isa(), vector_isa());  // decided once
}

TEST(VectorIsa, ByVectorIsaPicksTheBuildForThatSet) {
  const int expected = vector_isa() == VectorIsa::Avx512 ? 512 : vector_isa() == VectorIsa::Avx2 ? 2 : 0;
  EXPECT_EQ(by_vector_isa(built_for_avx512, built_for_avx2, built_for_base)(), expected);
}

}  // namespace
}  // namespace wg
