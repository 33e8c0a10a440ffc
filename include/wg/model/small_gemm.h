// A float matrix product for the CPU attention kernel's many small
// products (a head's scores and values inside one sequence: tens to a few
// hundred rows, 8 to 64 wide), on one thread, with AVX-512 or AVX2. Through
// BLAS each of them pays a call's bookkeeping, and OpenBLAS's small-matrix
// path reads a head's rows (hundreds of floats apart in the packed q, k,
// v) slowly: in the model the embed's 79 x 79 x 32 products ran at 35-50
// GFLOP/s a thread. Here register tiles of rows x vectors run over op(A)
// where it lies and op(B) copied once per block of columns into a panel on
// the stack (src/model/small_gemm.cpp, small_gemm_avx2.cpp). A product's
// bits depend only on its operands and the CPU's build, not on the thread
// or the call (the attention kernel's none and recomputed runs agree bit
// for bit). No LibTorch in this header.
#pragma once

#include <cstdint>
#include <vector>

#include "wg/util/vector_isa.h"

namespace wg {

// C = alpha · op(A) · op(B) + beta · C, row-major as wg::gemm
// (wg/util/blas.h): op(A) is m×k (A stored k×m when trans_a), op(B) k×n
// (n×k when trans_b), C m×n; row i of A starts at a + i·lda, and so on.
// With beta == 0, C is only written, and with alpha == 0 A and B are not
// read (a NaN there does not come through), as BLAS.
// Runs the build for the CPU's vector_isa(); returns false, and touches
// nothing, where the CPU has neither AVX-512 nor AVX2 with FMA (the caller
// then goes to BLAS). Any sizes; meant for small ones.
bool small_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Whether the attention kernel takes small_gemm for the products of a
// sequence of lq query and lk key rows, dh wide (attention_tiles.h), rather
// than BLAS: where lq and lk are at least 16 and each product is at most
// small_sgemm_limit() multiply-adds (lq · lk · dh; onednn_sgemm.h), the
// products that would otherwise go to the BLAS's own small path, on one
// thread (OpenBLAS splits a product over threads only above 4 · 65536),
// where its call's bookkeeping and how it reads a head's strided rows
// cost more than the products:
// - AVX-512, up to 64³: the embed's 79 channels (35-50 GFLOP/s a thread
//   through OpenBLAS);
// - AVX2, up to 32 · 32 · 24: on an AMD EPYC OpenBLAS packs both operands
//   of every product (bench_small_gemm, one thread: cpu_small's embed, 24
//   x 24 by 8, in 0.17-0.23 us against OpenBLAS's 0.29-0.48 and oneDNN's
//   0.39-0.52; 24 x 24 by 32 in 0.51-0.60 against 0.87-0.97 and 0.68-0.90).
//   Above that limit oneDNN takes them: small_gemm is as fast there alone
//   (cpu_wide's embed, 79 x 79 by 32: 5.4 against 5.5 us), but in the
//   kernel the embed's core at cpu_wide ran 3-8 % slower with it
//   (bench_attention_core --only embed, 3 runs each).
// Shorter sequences (cells of a few points), where BLAS's small path is
// as quick, and larger products (a dense engine's long sequences), which
// BLAS may split over the rank's threads when a call has one problem, go
// to BLAS. bench_small_gemm marks the products it takes.
bool small_gemm_takes(int64_t lq, int64_t lk, int64_t dh);

// Whether this CPU runs the build for `isa` (never VectorIsa::Base), and
// every build it runs, widest first (empty: neither AVX-512 nor AVX2).
bool small_gemm_runs(VectorIsa isa);
std::vector<VectorIsa> small_gemm_builds();

// The same with the build for `isa` (tests and bench_small_gemm run every
// build the CPU runs): false where the CPU does not run it.
bool small_gemm_on(VectorIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace wg
