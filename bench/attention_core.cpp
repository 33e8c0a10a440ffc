// Benchmark: the CPU attention kernel (wg/model/attention_core.h) against
// the padded reference a PyTorch user would write (plain LibTorch products
// on segments padded to the longest, masked, autograd's backward), forward
// and forward + backward, on the shapes of the model's sections at an
// ERA5-shaped CPU size. Both sides in one process, round-robin, the same
// inputs; median times. A second table times the layers' call (q/k norm on,
// as the model runs) on the fused projections read in place (Projections)
// against the same kernel on split views whose q and k LibTorch's layer
// norm normed (copying them; the split's backward concatenating the
// gradients), the layout before 5176c38. Writes the tables and JSON.
//
//   bench_attention_core [--threads 2] [--reps 10] [--rounds 3] [--dropout 0.1]
//                        [--out bench/results/attention_core.json] [--trace FILE] [--only TEXT]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "bench_median.h"
#include "wg/model/attention_core.h"
#include "wg/model/norms.h"
#include "wg/util/threads.h"

using namespace wg;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

using wg::bench::upper_median;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One shape: how to run the kernel and the reference on fresh leaves.
struct Case {
  std::string name, shape;
  double flops = 0;  // forward: scores and values, 4 · lq · lk · H · dh per segment
  std::function<torch::Tensor(const std::vector<torch::Tensor>&, bool kernel)> run;
  std::vector<std::vector<int64_t>> inputs;  // q, k, v sizes
  // The fused projections (self: qkv; cross: q, kv): read in place, or split and normed by LibTorch first.
  std::function<torch::Tensor(const std::vector<torch::Tensor>&, bool in_place)> fused;
  std::vector<std::vector<int64_t>> fused_inputs;
};

constexpr double kQkNormEps = 1e-5;

Case dense_case(const std::string& name, int64_t B, int64_t L, int64_t H, int64_t dh, double dropout) {
  Case c;
  c.name = name;
  c.shape = std::to_string(B) + " x " + std::to_string(L) + " tokens, " + std::to_string(H) + " x " + std::to_string(dh);
  c.flops = 4.0 * double(B) * double(L) * double(L) * double(H * dh);
  c.inputs = {{B, L, H, dh}, {B, L, H, dh}, {B, L, H, dh}};
  c.run = [dropout](const std::vector<torch::Tensor>& t, bool kernel) {
    return kernel ? dense_attention(t[0], t[1], t[2], dropout, true)
                  : plain_dense_attention(t[0], t[1], t[2], dropout, true);
  };
  c.fused_inputs = {{B, L, 3 * H * dh}};
  c.fused = [dropout, H](const std::vector<torch::Tensor>& t, bool in_place) {
    const Projections p = Projections::self(t[0], H);
    if (in_place) return dense_attention(p, dropout, true, QkNorm{kQkNormEps});
    const auto [q, k, v] = p.split();
    return dense_attention(plain_layer_norm(q, kQkNormEps), plain_layer_norm(k, kQkNormEps), v, dropout, true);
  };
  return c;
}

Case varlen_case(const std::string& name, std::vector<int64_t> lq, std::vector<int64_t> lk, int64_t H, int64_t dh,
                 double dropout, bool cross) {
  Case c;
  c.name = name;
  int64_t rq = 0, rk = 0, max_q = 0, max_k = 0;
  for (size_t s = 0; s < lq.size(); ++s) {
    rq += lq[s], rk += lk[s], max_q = std::max(max_q, lq[s]), max_k = std::max(max_k, lk[s]);
    c.flops += 4.0 * double(lq[s]) * double(lk[s]) * double(H * dh);
  }
  c.shape = std::to_string(lq.size()) + " segments (" + std::to_string(rq) + " x " + std::to_string(rk) +
            " rows, longest " + std::to_string(max_q) + " x " + std::to_string(max_k) + "), " + std::to_string(H) +
            " x " + std::to_string(dh);
  c.inputs = {{rq, H, dh}, {rk, H, dh}, {rk, H, dh}};
  const VarlenSegments seg = VarlenSegments::from_lengths(lq, lk, torch::kCPU);  // the reference pads from it
  c.run = [seg, dropout](const std::vector<torch::Tensor>& t, bool kernel) {
    return kernel ? varlen_attention(t[0], t[1], t[2], seg, dropout, true)
                  : padded_varlen_attention(t[0], t[1], t[2], seg, dropout, true);
  };
  c.fused_inputs = cross ? std::vector<std::vector<int64_t>>{{rq, H * dh}, {rk, 2 * H * dh}}
                         : std::vector<std::vector<int64_t>>{{rq, 3 * H * dh}};
  c.fused = [seg, dropout, H, cross](const std::vector<torch::Tensor>& t, bool in_place) {
    const Projections p = cross ? Projections::cross(t[0], t[1], H) : Projections::self(t[0], H);
    if (in_place) return varlen_attention(p, seg, dropout, true, QkNorm{kQkNormEps});
    const auto [q, k, v] = p.split();
    return varlen_attention(plain_layer_norm(q, kQkNormEps), plain_layer_norm(k, kQkNormEps), v, seg, dropout, true);
  };
  return c;
}

std::vector<int64_t> random_lengths(int64_t n, int64_t lo, int64_t hi, uint64_t seed) {
  torch::manual_seed(seed);
  const torch::Tensor t = torch::randint(lo, hi + 1, {n}, torch::kInt64);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The CPU attention kernel against the padded reference, per section shape", "bench_attention_core"};
  int threads = 2, reps = 10, rounds = 3;
  double dropout = 0.1;
  std::string out = "bench/results/attention_core.json", trace, only;
  app.add_option("--threads", threads, "intra-op threads")->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions per side and round")->capture_default_str();
  app.add_option("--rounds", rounds, "rounds (the sides alternate within each)")->capture_default_str();
  app.add_option("--dropout", dropout, "probability dropout, as the model trains (0: none)")->capture_default_str();
  app.add_option("--out", out, "JSON results")->capture_default_str();
  app.add_option("--trace", trace, "also write a chrome trace of the kernel's forward + backward, every shape");
  app.add_option("--only", only, "run only the sections whose name contains this text (e.g. embed)");
  bench::parse_or_exit(app, argc, argv);
  set_compute_threads(threads);

  // The shapes of bench_vs_pytorch's config/cpu_wide.yml: ERA5-shaped embed
  // (71 channels, 256 wide, 8 heads), local engine cells (256 wide), the
  // adapter's cell queries, aggregation and global engine (512 wide), the
  // decoder's cross attention (each target point to 9 neighbour cells).
  const std::vector<int64_t> cells = random_lengths(2 * 768, 0, 8, 1);
  std::vector<int64_t> non_empty;
  for (int64_t l : cells)
    if (l > 0) non_empty.push_back(l);
  const std::vector<int64_t> points = random_lengths(2 * 768, 0, 6, 2);
  std::vector<Case> cases = {
      dense_case("embed (channels)", 170, 71, 8, 32, dropout),
      varlen_case("ae_local (cells)", cells, cells, 8, 32, dropout, false),
      varlen_case("ae_adapter (cell queries)", std::vector<int64_t>(non_empty.size(), 1), non_empty, 8, 64, dropout,
                  true),
      dense_case("ae_global", 2, 768, 8, 64, dropout),
      varlen_case("pred cross (9 cells)", points, std::vector<int64_t>(points.size(), 9), 4, 64, dropout, true),
  };
  cases.erase(
      std::remove_if(cases.begin(), cases.end(), [&](const Case& c) { return c.name.find(only) == std::string::npos; }),
      cases.end());
  if (cases.empty()) {
    std::fprintf(stderr, "bench_attention_core: --only '%s' matches no section\n", only.c_str());
    return 2;
  }

  // Median forward and forward + backward seconds of run(leaves, side) for sides 0 and 1, alternating per round.
  const auto time_sides = [&](const std::vector<std::vector<int64_t>>& sizes, const auto& run) {
    std::vector<torch::Tensor> leaves;
    for (const auto& s : sizes) leaves.push_back(torch::randn(s).requires_grad_(true));
    std::vector<double> fwd[2], both[2];
    for (int r = 0; r < rounds; ++r)
      for (int side = 0; side < 2; ++side)
        for (int k = 0; k < reps + 1; ++k) {
          for (auto& t : leaves) t.mutable_grad() = torch::Tensor();
          const auto t0 = Clock::now();
          const torch::Tensor o = run(leaves, side == 0);
          const double f = seconds_since(t0);
          o.backward(torch::ones_like(o));
          const double b = seconds_since(t0);
          if (k == 0) continue;  // warm-up
          fwd[side].push_back(f);
          both[side].push_back(b);
        }
    return std::array<double, 4>{upper_median(fwd[0]), upper_median(fwd[1]), upper_median(both[0]),
                                 upper_median(both[1])};
  };

  json rows = json::array();
  std::printf("%-26s %-52s %9s %9s %9s %9s %8s %8s\n", "section", "shape", "fwd ms", "ref fwd", "f+b ms", "ref f+b",
              "fwd x", "f+b x");
  for (Case& c : cases) {
    const auto [kf, rf, kb, rb] = time_sides(c.inputs, c.run);
    std::printf("%-26s %-52s %9.2f %9.2f %9.2f %9.2f %7.2fx %7.2fx\n", c.name.c_str(), c.shape.c_str(), kf * 1e3,
                rf * 1e3, kb * 1e3, rb * 1e3, rf / kf, rb / kb);
    rows.push_back({{"section", c.name}, {"shape", c.shape}, {"forward_flops", c.flops},
                    {"kernel_forward_seconds", kf}, {"reference_forward_seconds", rf},
                    {"kernel_forward_backward_seconds", kb}, {"reference_forward_backward_seconds", rb},
                    {"kernel_forward_backward_gflops", 3 * c.flops / kb * 1e-9}});
    if (!trace.empty()) {
      std::vector<torch::Tensor> leaves;
      for (const auto& s : c.inputs) leaves.push_back(torch::randn(s).requires_grad_(true));
      const std::string file = trace + "." + std::to_string(rows.size()) + ".json";
      {
        const torch::autograd::profiler::RecordProfile profile(file);
        for (int k = 0; k < 3; ++k) {
          const torch::Tensor o = c.run(leaves, true);
          o.backward(torch::ones_like(o));
        }
      }
      std::printf("  wrote %s (3 kernel forward + backward)\n", file.c_str());
    }
  }

  std::printf("\nThe layers' call with the q/k norm: fused projections read in place, against split + LibTorch's "
              "layer norm\n%-26s %9s %9s %9s %9s %8s %8s\n",
              "section", "fwd ms", "split fwd", "f+b ms", "split f+b", "fwd x", "f+b x");
  json fused_rows = json::array();
  for (Case& c : cases) {
    const auto [pf, sf, pb, sb] = time_sides(c.fused_inputs, c.fused);
    std::printf("%-26s %9.2f %9.2f %9.2f %9.2f %7.2fx %7.2fx\n", c.name.c_str(), pf * 1e3, sf * 1e3, pb * 1e3,
                sb * 1e3, sf / pf, sb / pb);
    fused_rows.push_back({{"section", c.name}, {"in_place_forward_seconds", pf}, {"split_forward_seconds", sf},
                          {"in_place_forward_backward_seconds", pb}, {"split_forward_backward_seconds", sb}});
  }
  json doc = {{"benchmark", "attention_core"}, {"threads", threads}, {"reps", reps}, {"rounds", rounds},
              {"dropout", dropout}, {"time_method", "median of reps x rounds per side; sides alternate per round"},
              {"cases", rows}, {"fused_projections_qk_norm", fused_rows}};
  const std::filesystem::path p(out);
  if (!p.parent_path().empty()) std::filesystem::create_directories(p.parent_path());
  std::ofstream(out) << doc.dump(2) << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
