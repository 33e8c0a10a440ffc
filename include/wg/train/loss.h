// WeatherGenerator's LossPhysical (wg-model.md §9.2): per stream and
// forecast step, the configured loss functions (mse: channel- and
// location-weighted; mae) over the target points, NaN targets zeroed but
// counted; weights divided by the number of positive terms; streams
// averaged over those with data; times the module weight. Per sample, then
// the mean over the batch's samples that have data (upstream has one
// sample per rank; docs/upstream-differences.md).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/data/stream_shape.h"
#include "wg/model/model_batch.h"

namespace wg {

struct PhysicalLossResult {
  // Scalar; undefined when no sample has a stream with data (upstream's
  // division by zero: the step is skipped); NaN when a term is not finite
  // (a prediction blew up: nan_policy decides).
  torch::Tensor loss;
  // Logging (as upstream's losses_all): per stream and loss function, the
  // per-channel losses averaged over steps, 0 turned into NaN.
  std::vector<std::string> names;               // "<stream>.<fct>"
  std::vector<std::vector<double>> per_channel;  // [names][n_tgt]
  // Per stream, the mean over its channels of the first loss function
  // (NaN when the stream had no data): the per-stream curve.
  std::vector<double> per_stream;
};

class PhysicalLoss {
 public:
  // `training`: stream and channel weights apply (validation: all 1).
  PhysicalLoss(const Config& config, const LossConfig& mode, const std::vector<StreamShape>& shapes, bool training);

  // preds[i][s] is target step forecast_offset + i (WeatherModel's output).
  PhysicalLossResult operator()(const ModelBatch& batch, const std::vector<std::vector<torch::Tensor>>& preds) const;

  const LossConfig& mode() const { return mode_; }

 private:
  struct Stream {
    std::string name;
    double weight = 1.0;
    std::vector<double> channel_weights;  // empty: none
    bool substeps_by_time = false;        // tokenize_spacetime: one sub-step per target time
    bool cosine_latitude = false;
    int num_channels = 0;
  };
  LossConfig mode_;
  int forecast_offset_ = 0;
  std::string timestep_weight_;
  double timestep_gamma_ = 1.0;
  std::vector<Stream> streams_;
};

}  // namespace wg
