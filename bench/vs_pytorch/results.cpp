// bench_vs_pytorch's results per mode (see results.h).
#include "results.h"

#include <algorithm>
#include <cstdio>

#include "text.h"
#include "wg/util/units.h"

namespace wg::bench::vs {

std::vector<ModeResult> mode_results(const std::vector<Mode>& modes, const std::vector<RecomputePlan>& plans) {
  std::vector<ModeResult> results(modes.size());
  for (size_t i = 0; i < modes.size(); ++i) {
    ModeResult& r = results[i];
    r.mode = modes[i];
    r.pieces_recomputed = plans[i].pieces_recomputed();
    r.pieces_total = plans[i].pieces_total();
    r.pieces_lean = plans[i].pieces_lean();
    r.cpp_keys = recomputed_keys(plans[i]);
  }
  return results;
}

void add_cpp_round(std::vector<ModeResult>& results, const std::vector<CppRun>& runs, int round) {
  for (size_t i = 0; i < results.size(); ++i) {
    ModeResult& r = results[i];
    const CppRun& c = runs[i];
    r.cpp_seconds.insert(r.cpp_seconds.end(), c.seconds.begin(), c.seconds.end());
    r.cpp_flops.insert(r.cpp_flops.end(), c.flops.begin(), c.flops.end());
    r.cpp_peak = std::max(r.cpp_peak, c.peak_extra);
    r.cpp_peak_timed = std::max(r.cpp_peak_timed, c.peak_timed);
    r.cpp_reserved = std::max(r.cpp_reserved, c.reserved_peak);
    if (round == 1) r.cpp_losses = c.losses;
    std::printf("  round %d C++  %-10s median %8.2f ms  peak %7.2f MiB\n", round, r.mode.name, median(c.seconds) * 1e3,
                c.peak_extra / kMiB);
    std::fflush(stdout);
  }
}

void add_twin_round(std::vector<ModeResult>& results, const json& doc, int round, TwinFacts& facts) {
  facts.torch_version = doc.value("torch_version", "");
  facts.memory_method = doc.value("step_peak_bytes_method", "");
  facts.time_method = doc.value("step_seconds_method", "");
  for (const auto& m : doc["modes"])
    for (ModeResult& r : results) {
      if (m["mode"].get<std::string>() != r.mode.name) continue;
      const auto sec = m["step_seconds"].get<std::vector<double>>();
      r.torch_seconds.insert(r.torch_seconds.end(), sec.begin(), sec.end());
      r.torch_peak = std::max(r.torch_peak, m["step_peak_bytes"].get<int64_t>());
      if (m.contains("peak_reserved_bytes") && !m["peak_reserved_bytes"].is_null())
        r.torch_reserved = std::max(r.torch_reserved, m["peak_reserved_bytes"].get<int64_t>());
      r.torch_pieces = m["pieces_recomputed"].get<int>();
      r.torch_keys = m["recomputed_pieces"].get<std::vector<std::string>>();
      if (m.contains("phase_seconds_median")) r.torch_phases = m["phase_seconds_median"];
      if (round == 1) r.torch_losses = m["losses"].get<std::vector<double>>();
      std::printf("  round %d twin %-10s median %8.2f ms  peak %7.2f MiB\n", round, r.mode.name, median(sec) * 1e3,
                  m["step_peak_bytes"].get<int64_t>() / kMiB);
    }
  std::fflush(stdout);
}

}  // namespace wg::bench::vs
