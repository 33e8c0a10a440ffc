// The CPU's vector instruction set (see header).
#include "wg/util/vector_isa.h"

namespace wg {

VectorIsa vector_isa() {
  static const VectorIsa chosen = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) return VectorIsa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VectorIsa::Avx2;
    return VectorIsa::Base;
  }();
  return chosen;
}

}  // namespace wg
