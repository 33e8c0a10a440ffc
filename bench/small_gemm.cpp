// Benchmark: the attention kernel's per-head products, one thread, through
// small_gemm (wg/model/small_gemm.h; each build this CPU runs) against the
// BLAS libraries the kernel would call otherwise: the BLAS's own sgemm
// (OpenBLAS; wg::gemm takes it up to small_sgemm_limit() multiply-adds)
// and oneDNN's (dnnl_sgemm, which wg::gemm takes above the limit through
// the process's sgemm_; in builds with WG_ONEDNN_SGEMM). Operands lie as
// in the kernel (products() below). Each product of each shape runs its
// calls back to back, on the same operands or (--cold) on operand sets
// cycled through 16 MiB; the sides alternate within each round; median
// per call over the rounds. Prints a table and writes JSON.
//
//   bench_small_gemm [--reps 2000] [--rounds 5] [--cold] [--out bench/results/small_gemm.json]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#ifdef WG_BENCH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include "bench_median.h"
#include "wg/model/small_gemm.h"
#include "wg/util/blas.h"
#include "wg/util/onednn_sgemm.h"

using namespace wg;
using json = nlohmann::json;

namespace {

using wg::bench::upper_median;

using Clock = std::chrono::steady_clock;

struct Product {
  std::string name;
  bool ta, tb;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;  // A, B and C as the kernel reads and writes them
};

// The six products of one (sequence, head) with lq query and lk key rows
// of width dh, 8 heads, with the q/k norm off (q and k read in place):
// forward q kᵀ and P v; backward Pᵀ dO, dO vᵀ, dS k, dSᵀ q. q, k, v and
// their gradients are slots of the fused projections' rows (3 · 8 · dh
// floats apart), O and dO rows of [R, 8, dh], the tile's scores, P and
// dS dense [lq, lk].
std::vector<Product> products(int64_t lq, int64_t lk, int64_t dh) {
  const int64_t fused = 3 * 8 * dh, out = 8 * dh;
  return {{"q kT", false, true, lq, lk, dh, fused, fused, lk},  {"P v", false, false, lq, dh, lk, lk, fused, out},
          {"PT dO", true, false, lk, dh, lq, lk, out, fused},   {"dO vT", false, true, lq, lk, dh, out, fused, lk},
          {"dS k", false, false, lq, dh, lk, lk, fused, fused}, {"dST q", true, false, lk, dh, lq, lk, fused, fused}};
}

struct Shape {
  std::string where;
  int64_t lq, lk, dh;
};

// The shapes of the model's sections at the CPU configurations (cpu_small's
// embed: 16 channels and 8 coordinates a point, 4 heads of 8; cpu_wide's: 79
// channels, 8 heads of 32), and around the AVX2 limit (32 · 32 · 24).
std::vector<Shape> shapes() {
  return {{"cpu_small embed", 24, 24, 8}, {"16 x 16, 8", 16, 16, 8},   {"16 x 16, 32", 16, 16, 32},
          {"24 x 24, 32", 24, 24, 32},    {"32 x 32, 24", 32, 32, 24}, {"48 x 48, 32", 48, 48, 32},
          {"cpu_wide embed", 79, 79, 32}, {"64 x 64, 64", 64, 64, 64}};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 2000, rounds = 5;
  std::string out = "bench/results/small_gemm.json";
  CLI::App app{"The attention kernel's per-head products: small_gemm against the BLAS, one thread", "bench_small_gemm"};
  app.add_option("--reps", reps, "calls per product, side and round")->check(CLI::Range(1, 10000000));
  app.add_option("--rounds", rounds, "rounds (the sides alternate within each)")->check(CLI::Range(1, 1000));
  bool cold = false;
  app.add_option("--out", out, "JSON results");
  app.add_flag("--cold", cold, "cycle each product through operand sets spanning 16 MiB (operands out of cache)");
  try {  // as the other benchmarks (bench_common.h): --help exits 0, bad usage one line and 2
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\nRun with --help for the options.\n", e.what());
    return 2;
  }
  if (!blas_available()) {
    std::fprintf(stderr, "bench_small_gemm: this process has no BLAS sgemm\n");
    return 1;
  }
  omp_set_num_threads(1);  // as inside the kernel's parallel region
  using Fn = std::function<void(const Product&, const float*, const float*, float*, int64_t)>;
  struct Side {
    std::string name;
    Fn run;
  };
  std::vector<Side> sides;
  // Column-major BLAS: the row-major C = op(A) op(B) is Cᵀ = op(B)ᵀ op(A)ᵀ (as wg::gemm, blas.cpp).
  auto blas_side = [](SgemmFn fn) {
    return [fn](const Product& p, const float* a, const float* b, float* c, int64_t ldc) {
      const int M = int(p.m), N = int(p.n), K = int(p.k), LDA = int(p.lda), LDB = int(p.ldb), LDC = int(ldc);
      const char ta = p.ta ? 'T' : 'N', tb = p.tb ? 'T' : 'N';
      const float alpha = 1, beta = 0;
      fn(&tb, &ta, &N, &M, &K, &alpha, b, &LDB, a, &LDA, &beta, c, &LDC);
    };
  };
  if (const SgemmFn own = blas_own_sgemm()) sides.push_back({"BLAS's own", blas_side(own)});
#ifdef WG_BENCH_ONEDNN
  // oneDNN's own entry (the process's sgemm_ hands products up to the limit to the BLAS's own).
  sides.push_back({"oneDNN", [](const Product& p, const float* a, const float* b, float* c, int64_t ldc) {
                     dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.m, p.n, p.k, 1.0f, a, p.lda, b, p.ldb, 0.0f, c,
                                ldc);
                   }});
#endif
  for (const VectorIsa isa : small_gemm_builds())
    sides.push_back({isa == VectorIsa::Avx512 ? "small_gemm AVX-512" : "small_gemm AVX2",
                     [isa](const Product& p, const float* a, const float* b, float* c, int64_t ldc) {
                       small_gemm_on(isa, p.ta, p.tb, p.m, p.n, p.k, 1.0f, a, p.lda, b, p.ldb, 0.0f, c, ldc);
                     }});

  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  std::printf("one thread; operands %s; small_sgemm_limit() %lld multiply-adds; sgemm_: %s\n",
              cold ? "cycled through 16 MiB (--cold)" : "the same each call", (long long)small_sgemm_limit(),
              sgemm_provider().c_str());
  std::printf("%-16s %-6s %13s", "shape", "product", "m x n x k");
  for (const Side& s : sides) std::printf(" %19s", (s.name + " us").c_str());
  std::printf("\n");
  json results = json::array();
  for (const Shape& sh : shapes())
    for (const Product& p : products(sh.lq, sh.lk, sh.dh)) {
      const int64_t a_rows = p.ta ? p.k : p.m, b_rows = p.tb ? p.n : p.k, ldc = p.ldc;
      // Operand sets side by side: one, or (cold) enough to span 16 MiB, past
      // L2, as the kernel's operands mostly are when a product reads them.
      const int64_t a_size = a_rows * p.lda, b_size = b_rows * p.ldb, c_size = p.m * ldc;
      const int64_t sets = cold ? std::max<int64_t>(1, (int64_t(16) << 20) / (4 * (a_size + b_size + c_size))) : 1;
      std::vector<float> a(size_t(sets * a_size)), b(size_t(sets * b_size)), c(size_t(sets * c_size));
      for (float& x : a) x = normal(gen);
      for (float& x : b) x = normal(gen);
      std::vector<std::vector<double>> us(sides.size());
      for (int r = 0; r < rounds; ++r)
        for (size_t s = 0; s < sides.size(); ++s) {
          sides[s].run(p, a.data(), b.data(), c.data(), ldc);  // warm
          const auto t0 = Clock::now();
          for (int i = 0; i < reps; ++i) {
            const int64_t j = i % sets;
            sides[s].run(p, a.data() + j * a_size, b.data() + j * b_size, c.data() + j * c_size, ldc);
          }
          us[s].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps);
        }
      const bool small = small_gemm_takes(sh.lq, sh.lk, sh.dh);
      char mnk[32];
      std::snprintf(mnk, sizeof mnk, "%lldx%lldx%lld", (long long)p.m, (long long)p.n, (long long)p.k);
      std::printf("%-16s %-6s %13s", sh.where.c_str(), p.name.c_str(), mnk);
      json row = {{"shape", sh.where}, {"lq", sh.lq},       {"lk", sh.lk},
                  {"dh", sh.dh},       {"product", p.name}, {"m", p.m},
                  {"n", p.n},          {"k", p.k},          {"kernel_takes_small_gemm", small}};
      for (size_t s = 0; s < sides.size(); ++s) {
        const double t = upper_median(us[s]);
        std::printf(" %19.3f", t);
        row["us_per_call"][sides[s].name] = t;
        row["gflops"][sides[s].name] = 2.0 * double(p.m * p.n * p.k) / t * 1e-3;
      }
      std::printf("%s\n", small ? "  (the kernel: small_gemm)" : "");
      results.push_back(row);
    }
  const std::filesystem::path path(out);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream(out) << json{{"benchmark", "small_gemm"},
                             {"small_sgemm_limit", small_sgemm_limit()},
                             {"sgemm_provider", sgemm_provider()},
                             {"reps", reps},
                             {"cold", cold},
                             {"rounds", rounds},
                             {"results", results}}
                            .dump(2)
                     << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
