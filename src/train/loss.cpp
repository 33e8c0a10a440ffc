// Masked-token loss (see header).
#include "wg/train/loss.h"

#include <stdexcept>

namespace wg {

MaskedLoss::MaskedLoss(const Config& config) : terms_(config.loss_fcts) {
  double sum = 0;
  for (const auto& s : config.streams) sum += s.loss_weight;
  if (sum <= 0) throw std::invalid_argument("the streams' loss_weight values sum to 0: nothing to train on");
  for (const auto& s : config.streams) stream_weights_.push_back(s.loss_weight / sum);
}

torch::Tensor MaskedLoss::operator()(const std::vector<torch::Tensor>& preds, const std::vector<torch::Tensor>& targets,
                                     const std::vector<torch::Tensor>& valid) const {
  TORCH_CHECK(preds.size() == targets.size() && preds.size() == stream_weights_.size(), "loss: stream count mismatch");
  torch::Tensor total;
  for (size_t s = 0; s < preds.size(); ++s) {
    if (stream_weights_[s] == 0) continue;
    const torch::Tensor diff = preds[s] - targets[s];
    const torch::Tensor w = s < valid.size() ? valid[s] : torch::Tensor();
    // With validity: the mean over valid values (none valid: 0, not NaN).
    const auto mean = [&w](const torch::Tensor& x) { return w.defined() ? (x * w).sum() / w.sum().clamp_min(1) : x.mean(); };
    torch::Tensor stream_loss;
    for (const LossTerm& t : terms_) {
      torch::Tensor term = t.name == "mae" ? mean(diff.abs()) : mean(diff.pow(2));
      stream_loss = stream_loss.defined() ? stream_loss + t.weight * term : t.weight * term;
    }
    stream_loss = stream_loss * stream_weights_[s];
    total = total.defined() ? total + stream_loss : stream_loss;
  }
  return total;
}

}  // namespace wg
