#pragma once
// The widest vector instruction set this CPU runs, for a hot loop compiled
// once per set (__attribute__((target(...)))) and picked at run time by
// feature, not by CPU model (a VM often names no model). Decided once.
//
//   Avx512: AVX-512 F and DQ (DQ multiplies 64-bit lanes)
//   Avx2:   AVX2 with FMA
//   Base:   the build's baseline
namespace wg {

enum class VectorIsa { Avx512, Avx2, Base };

VectorIsa vector_isa();

// Of one function's three builds, each compiled for one of the sets above,
// the one this CPU runs: by_vector_isa(f_avx512, f_avx2, f_base).
template <typename Fn>
Fn by_vector_isa(Fn avx512, Fn avx2, Fn base) {
  switch (vector_isa()) {
    case VectorIsa::Avx512: return avx512;
    case VectorIsa::Avx2: return avx2;
    case VectorIsa::Base: break;
  }
  return base;
}

}  // namespace wg
