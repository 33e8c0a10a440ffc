// Batch layout (wg-data.md §7.2–7.4) with each sample on its own cells.
#include "wg/data/batch_layout.h"

#include <algorithm>

#include "wg/data/pipeline_error.h"

namespace wg {

BatchLayout layout_from_lens(int64_t num_samples, int64_t num_streams, int64_t num_cells, int64_t num_steps,
                             const std::vector<std::vector<int32_t>>& source_lens,
                             const std::vector<std::vector<int32_t>>& target_lens) {
  const int64_t b_n = num_samples;
  const int64_t s_n = num_streams;
  const int64_t c_n = num_cells;
  BatchLayout out;
  out.num_samples = b_n;
  out.num_streams = s_n;
  out.num_cells = c_n;
  out.num_forecast_steps = num_steps;

  // tot[g] = Σ_s lens[b, s, c] for g = b·C + c; base[g] = Σ_{g' < g} tot[g'].
  out.source_cell_lens.assign(1 + b_n * c_n, 0);
  for (int64_t b = 0; b < b_n; ++b) {
    for (int64_t s = 0; s < s_n; ++s) {
      const std::vector<int32_t>& lens = source_lens[b * s_n + s];
      for (int64_t c = 0; c < c_n; ++c) out.source_cell_lens[1 + b * c_n + c] += lens[c];
    }
  }
  std::vector<int64_t> off(b_n * c_n, 0);
  std::vector<int32_t> off_pe(b_n * c_n, 0);
  int64_t base = 0;
  for (int64_t g = 0; g < b_n * c_n; ++g) {
    off[g] = base;
    base += out.source_cell_lens[1 + g];
    out.max_cell_tokens = std::max(out.max_cell_tokens, out.source_cell_lens[1 + g]);
  }
  out.num_tokens = base;

  out.idxs_embed.resize(b_n * s_n);
  out.idxs_embed_pe.resize(b_n * s_n);
  for (int64_t b = 0; b < b_n; ++b) {
    for (int64_t s = 0; s < s_n; ++s) {
      const std::vector<int32_t>& lens = source_lens[b * s_n + s];
      std::vector<int64_t>& idx = out.idxs_embed[b * s_n + s];
      std::vector<int32_t>& pe = out.idxs_embed_pe[b * s_n + s];
      for (int64_t c = 0; c < c_n; ++c) {
        const int64_t g = b * c_n + c;
        for (int32_t k = 0; k < lens[c]; ++k) {
          idx.push_back(off[g] + k);
          pe.push_back(off_pe[g] + k);
        }
        off[g] += lens[c];
        off_pe[g] += lens[c];
      }
    }
  }

  out.target_coords_idx.assign(s_n, std::vector<std::vector<int32_t>>(num_steps));
  for (int64_t s = 0; s < s_n; ++s) {
    for (int64_t f = 0; f < num_steps; ++f) {
      std::vector<int32_t>& t = out.target_coords_idx[s][f];
      t.assign(1 + b_n * c_n, 0);
      for (int64_t b = 0; b < b_n; ++b) {
        const std::vector<int32_t>& lens = target_lens[(b * s_n + s) * num_steps + f];
        std::copy(lens.begin(), lens.end(), t.begin() + 1 + b * c_n);
      }
    }
  }
  return out;
}

BatchLayout layout_batch(const std::vector<std::vector<StreamSample>>& batch) {
  const int64_t b_n = static_cast<int64_t>(batch.size());
  const int64_t s_n = b_n ? static_cast<int64_t>(batch[0].size()) : 0;
  const int64_t c_n = s_n ? static_cast<int64_t>(batch[0][0].source_lens.size()) : 0;
  const int64_t f_n = s_n ? static_cast<int64_t>(batch[0][0].targets.size()) : 0;
  std::vector<std::vector<int32_t>> source_lens;
  std::vector<std::vector<int32_t>> target_lens;
  for (int64_t b = 0; b < b_n; ++b) {
    if (static_cast<int64_t>(batch[b].size()) != s_n) {
      throw PipelineError("(batch)", "streams",
                          "sample " + std::to_string(b) + " has " + std::to_string(batch[b].size()) +
                              " streams, sample 0 has " + std::to_string(s_n));
    }
    for (const StreamSample& ss : batch[b]) {
      if (static_cast<int64_t>(ss.source_lens.size()) != c_n) {
        throw PipelineError(ss.stream, "source_lens",
                            "has " + std::to_string(ss.source_lens.size()) + " cells, expected " + std::to_string(c_n));
      }
      if (static_cast<int64_t>(ss.targets.size()) != f_n) {
        throw PipelineError(
            ss.stream, "forecast steps",
            "has " + std::to_string(ss.targets.size()) + " target steps, expected " + std::to_string(f_n));
      }
      source_lens.push_back(ss.source_lens);
      for (const StepTargets& t : ss.targets) {
        if (static_cast<int64_t>(t.cell_lens.size()) != c_n) {
          throw PipelineError(ss.stream, "target cell_lens",
                              "has " + std::to_string(t.cell_lens.size()) + " cells, expected " + std::to_string(c_n));
        }
        target_lens.push_back(t.cell_lens);
      }
    }
  }
  return layout_from_lens(b_n, s_n, c_n, f_n, source_lens, target_lens);
}

}  // namespace wg
