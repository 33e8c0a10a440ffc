// A host-side training batch: per stream, normalised token values, token
// centroids and the mask of tokens the model must predict. Plain vectors,
// so the data layer needs no LibTorch; train/batch_tensors converts them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wg {

constexpr int kCentroidFeatures = 5;  // lat, sin lon, cos lon, sin tod, cos tod

// What the data layer resolved for a stream, and the model is built for:
// the channels its tokens carry (an anemoi stream's come from its store)
// and the points per token.
struct StreamShape {
  std::string name;
  int token_size = 0;
  int num_channels = 0;               // C: values per point the model sees
  std::vector<std::string> channels;  // their names (anemoi; empty for synthetic streams)
};

struct StreamBatch {
  std::string stream;
  int num_samples = 0;  // B
  int tokens = 0;       // T tokens per sample
  int token_size = 0;   // points per token
  int channels = 0;     // C
  std::vector<float> values;     // [B, T, token_size, C], normalised per channel
  std::vector<float> centroids;  // [B, T, kCentroidFeatures]
  std::vector<uint8_t> masked;   // [B, T], 1 = hidden from the model, in the loss
  // [B, T, token_size, C], 1 = a real target value: 0 for NaN data, padding
  // and channels that are no target. Empty: every value is one.
  std::vector<uint8_t> valid;
};

struct Batch {
  std::vector<int64_t> sample_ids;  // global sample ids, in batch order
  std::vector<int64_t> windows;     // per sample, the start (seconds since 1970) of the anemoi window read (empty: no anemoi stream)
  std::vector<StreamBatch> streams;  // in config order
};

}  // namespace wg
