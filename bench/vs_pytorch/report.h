// bench_vs_pytorch's report: the table per mode (C++ against the twin,
// the FLOP rate against sgemm), each C++ mode against its own none, the
// activation peaks, the targets met or not, the phases; then the
// JSON (bench/plot_vs_pytorch.py reads it) and the plot.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "results.h"
#include "twin.h"
#include "wg/util/peak_flops.h"

namespace wg::bench::vs {

// What the report says of the run as a whole.
struct RunFacts {
  std::vector<std::string> config_files, overrides;
  int64_t parameters = 0;
  int batch_size = 0;
  int64_t keep_freed_mib = 0;  // freed memory C++ keeps for the next step (0: none)
  std::string device;          // "cpu" or "cuda:N"
  std::vector<double> sgemm;   // the reference rate before and after the runs
  std::string sgemm_label;
  PeakFlops peak;    // the GPU's (MFU); unset on the CPU
  std::string side;  // both, cpp or twin
  bool run_cpp() const { return side != "twin"; }
  bool run_twin() const { return side != "cpp"; }
  bool breakdown = false, activation_peaks = false;
  std::string load_start, load_end;
  int rounds = 0, warmup = 0, steps = 0, profiled = 0, num_batches = 0;
  std::vector<double> dump_losses;
  TwinSettings twin;  // both sides' threads and device, the dumps, the optimizer's settings per step
  TwinFacts twin_facts;
  json parity;           // the loss-parity run; null when not run
  std::string out;       // the JSON's path
  std::string work_dir;  // the dumps and the twin's outputs
  bool plot = true;
};

// Prints the report, writes the JSON to facts.out and, when both sides ran
// and facts.plot, the plot beside it.
void report(const std::vector<ModeResult>& results, const RunFacts& facts);

}  // namespace wg::bench::vs
