// Host batch to tensors (see header).
#include "wg/train/batch_tensors.h"

namespace wg {

ModelInput to_model_input(const Batch& batch, const torch::Device& device) {
  ModelInput in;
  in.batch_size = int64_t(batch.sample_ids.size());
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  for (const StreamBatch& sb : batch.streams) {
    StreamInput si;
    si.stream = sb.stream;
    // from_blob does not copy; clone() copies into the (counted) allocator
    si.values = torch::from_blob(const_cast<float*>(sb.values.data()),
                                 {sb.num_samples, sb.tokens, sb.token_size, sb.channels}, f32)
                    .to(device, /*non_blocking=*/false, /*copy=*/true);
    si.centroids = torch::from_blob(const_cast<float*>(sb.centroids.data()),
                                    {sb.num_samples, sb.tokens, kCentroidFeatures}, f32)
                       .to(device, false, true);
    std::vector<int64_t> vis, msk;
    for (size_t i = 0; i < sb.masked.size(); ++i) (sb.masked[i] ? msk : vis).push_back(int64_t(i));
    si.visible = torch::tensor(vis, torch::kInt64).to(device);
    si.masked = torch::tensor(msk, torch::kInt64).to(device);
    if (!sb.valid.empty())
      si.valid = torch::from_blob(const_cast<uint8_t*>(sb.valid.data()),
                                  {sb.num_samples, sb.tokens, sb.token_size, sb.channels}, torch::kUInt8)
                     .to(device, torch::kFloat32);
    in.streams.push_back(std::move(si));
  }
  return in;
}

std::vector<torch::Tensor> masked_targets(const ModelInput& input) {
  std::vector<torch::Tensor> out;
  for (const StreamInput& si : input.streams) {
    const int64_t BT = si.values.size(0) * si.values.size(1);
    out.push_back(si.values.reshape({BT, si.values.size(2), si.values.size(3)}).index_select(0, si.masked));
  }
  return out;
}

std::vector<torch::Tensor> masked_valid(const ModelInput& input) {
  std::vector<torch::Tensor> out;
  for (const StreamInput& si : input.streams) {
    if (!si.valid.defined()) {
      out.emplace_back();
      continue;
    }
    const int64_t BT = si.valid.size(0) * si.valid.size(1);
    out.push_back(si.valid.reshape({BT, si.valid.size(2), si.valid.size(3)}).index_select(0, si.masked));
  }
  return out;
}

int64_t token_count(const Batch& batch) {
  int64_t n = 0;
  for (const StreamBatch& sb : batch.streams) n += int64_t(sb.num_samples) * sb.tokens;
  return n;
}

}  // namespace wg
