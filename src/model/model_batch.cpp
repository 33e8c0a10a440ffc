// The FLOP count's view of a batch (see wg/model/model_batch.h).
#include "wg/model/model_batch.h"

namespace wg {

FlopShape flop_shape(const ModelBatch& batch) {
  FlopShape s;
  s.num_samples = batch.num_samples;
  s.num_cells = batch.num_cells;
  s.num_tokens = batch.num_tokens;
  s.source_cell_lens = batch.source_cell_lens;
  s.num_target_steps = batch.num_target_steps();
  for (const StreamBatchTensors& sb : batch.streams) {
    FlopShape::Stream st;
    st.name = sb.name;
    for (const torch::Tensor& t : sb.source_tokens) st.source_tokens += t.size(0);
    for (size_t f = 0; f < sb.target_lens.size(); ++f)
      st.target_lens.push_back(sb.target_coords[f].size(0) > 0 ? sb.target_lens[f] : std::vector<int64_t>{});
    s.streams.push_back(std::move(st));
  }
  return s;
}

}  // namespace wg
