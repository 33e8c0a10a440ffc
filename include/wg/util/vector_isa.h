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

}  // namespace wg
