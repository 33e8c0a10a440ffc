// Host batch to model tensors (see header).
#include "wg/train/batch_tensors.h"

namespace wg {

namespace {
// A float array [rows, width] as a tensor on `device` (copied).
torch::Tensor floats(const std::vector<float>& v, int64_t width, const torch::Device& device) {
  const int64_t rows = width > 0 ? int64_t(v.size()) / width : 0;
  if (rows == 0) return torch::zeros({0, width}, torch::TensorOptions().device(device));
  return torch::from_blob(const_cast<float*>(v.data()), {rows, width}, torch::kFloat32).to(device, false, true);
}

template <class T>
torch::Tensor indices(const std::vector<T>& v, const torch::Device& device) {
  std::vector<int64_t> wide(v.begin(), v.end());
  return torch::tensor(wide, torch::kInt64).to(device);
}
}  // namespace

ModelBatch to_model_batch(const BuiltBatch& batch, const torch::Device& device) {
  const BatchLayout& L = batch.layout;
  const int64_t B = L.num_samples, S = L.num_streams, C = L.num_cells;
  ModelBatch mb;
  mb.num_samples = B;
  mb.num_cells = C;
  mb.num_tokens = L.num_tokens;
  mb.source_cell_lens.assign(L.source_cell_lens.begin() + 1, L.source_cell_lens.end());
  for (int64_t s = 0; s < S; ++s) {
    StreamBatchTensors sb;
    const StreamSample& first = batch.samples.at(0).at(size_t(s));
    sb.name = first.stream;
    const int64_t steps = int64_t(first.targets.size());
    for (int64_t b = 0; b < B; ++b) {
      const StreamSample& x = batch.samples[size_t(b)][size_t(s)];
      const int64_t n = x.num_source_tokens();
      const int64_t width = x.source_width;
      sb.source_tokens.push_back(
          n == 0 ? torch::zeros({0, x.token_size, width}, torch::TensorOptions().device(device))
                 : torch::from_blob(const_cast<float*>(x.source_tokens.data()), {n, x.token_size, width},
                                    torch::kFloat32)
                       .to(device, false, true));
      sb.source_centroids.push_back(floats(x.source_centroids, kCentroidWidth, device));
      sb.idxs_embed.push_back(indices(L.idxs_embed[size_t(b * S + s)], device));
      sb.idxs_embed_pe.push_back(indices(L.idxs_embed_pe[size_t(b * S + s)], device));
      sb.weight.push_back(x.source_is_spoof || x.target_is_spoof ? 0.0 : 1.0);
    }
    for (int64_t f = 0; f < steps; ++f) {
      std::vector<float> coords, values, lat;
      std::vector<int64_t> times, points;
      int64_t coord_width = first.target_coord_width, channels = first.num_target_channels;
      for (int64_t b = 0; b < B; ++b) {
        const StepTargets& t = batch.samples[size_t(b)][size_t(s)].targets.at(size_t(f));
        coords.insert(coords.end(), t.coords.begin(), t.coords.end());
        values.insert(values.end(), t.values.begin(), t.values.end());
        times.insert(times.end(), t.times.begin(), t.times.end());
        for (int64_t p = 0; p < t.num_points(); ++p) lat.push_back(t.coords_raw[size_t(2 * p)]);
        points.push_back(t.num_points());
      }
      sb.target_coords.push_back(floats(coords, coord_width, device));
      sb.target_values.push_back(floats(values, channels, device));
      const auto& idx = L.target_coords_idx[size_t(s)][size_t(f)];
      sb.target_lens.emplace_back(idx.begin() + 1, idx.end());
      sb.sample_points.push_back(points);
      sb.target_times.push_back(std::move(times));
      sb.target_lat.push_back(std::move(lat));
    }
    mb.streams.push_back(std::move(sb));
  }
  return mb;
}

int64_t token_count(const BuiltBatch& batch) { return batch.layout.num_tokens; }

int64_t target_count(const BuiltBatch& batch) {
  int64_t n = 0;
  for (const auto& sample : batch.samples)
    for (const StreamSample& x : sample)
      for (const StepTargets& t : x.targets) n += t.num_points();
  return n;
}

}  // namespace wg
