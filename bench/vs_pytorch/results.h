// bench_vs_pytorch's results per mode, gathered round by round from the
// C++ runs and the twin's JSON; report.h prints and writes them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpp_side.h"

namespace wg::bench::vs {

struct ModeResult {
  Mode mode;
  // C++'s plan in this mode
  int pieces_recomputed = 0, pieces_total = 0, pieces_lean = 0;
  std::vector<std::string> cpp_keys;  // its recomputed pieces
  // the C++ side, over all rounds
  std::vector<double> cpp_seconds, cpp_flops;  // per timed step
  std::vector<double> cpp_losses;              // round 1's
  int64_t cpp_peak = 0, cpp_peak_timed = 0, cpp_reserved = 0;
  json cpp_phases;            // --breakdown
  ActivationPeak activation;  // not measured: -1
  // the twin, over all rounds
  std::vector<double> torch_seconds, torch_losses;
  int64_t torch_peak = 0, torch_reserved = 0;
  int torch_pieces = 0;
  std::vector<std::string> torch_keys;
  json torch_phases;
};

// One result per mode, with C++'s plan in it.
std::vector<ModeResult> mode_results(const std::vector<Mode>& modes, const std::vector<RecomputePlan>& plans);

// A round of the C++ side (run_cpp's runs, in the modes' order); prints
// each mode's median and peak.
void add_cpp_round(std::vector<ModeResult>& results, const std::vector<CppRun>& runs, int round);

// What the twin says of itself and of its measurements.
struct TwinFacts {
  std::string torch_version, memory_method, time_method;
};

// A round of the twin (its JSON); prints each mode's median and peak.
void add_twin_round(std::vector<ModeResult>& results, const json& doc, int round, TwinFacts& facts);

}  // namespace wg::bench::vs
