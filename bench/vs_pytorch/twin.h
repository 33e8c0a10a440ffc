// bench_vs_pytorch's twin side: the command that runs the PyTorch twin
// (tests/reference/wg_twin.py bench) on the step dumps with the C++ side's
// optimizer settings per step, and its run, from a thread off OpenMP's
// binding. No LibTorch here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace wg::bench::vs {

// What every twin run shares.
struct TwinSettings {
  std::string python;  // the twin's Python, with its torch
  int threads = 2;
  bool blas_omp = false;  // the OpenMP OpenBLAS (else its BLAS held to one thread)
  bool cuda = false, bf16 = false;
  std::vector<std::string> dumps;   // the step dumps, in order
  std::vector<double> lrs, beta1s;  // per step
  double beta2 = 0.999, eps = 1e-8, weight_decay = 0, grad_clip = 0, embed_dropout_final_rate = 0;
  int64_t seed = 0;
};

// The twin's shell command for `modes` (comma-separated), `warmup` + `steps`
// timed steps and `profiled` more, dropout on or off; its JSON to
// `json_out`, its output to `log`.
std::string twin_command(const TwinSettings& s, const std::string& modes, int warmup, int steps, int profiled,
                         bool dropout, const std::string& json_out, const std::string& log);

// Runs `command`; its JSON. Where it fails: the command and its log on
// stderr, and the benchmark exits 1.
nlohmann::json run_twin(const std::string& command, const std::string& log, const std::string& json_out);

}  // namespace wg::bench::vs
