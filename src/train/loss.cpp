// LossPhysical (see header), step by step as upstream's
// loss_module_physical.py and loss_functions.py compute it.
#include "wg/train/loss.h"

#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

namespace wg {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// mse_channel_location_weighted / mae on one sub-step: target [P, ch],
// pred [ens, P, ch]; NaN targets zeroed on both sides but counted.
std::pair<torch::Tensor, torch::Tensor> loss_function(const std::string& name, const torch::Tensor& target,
                                                      const torch::Tensor& pred, const torch::Tensor& channel_weights,
                                                      const torch::Tensor& point_weights) {
  const torch::Tensor valid = ~torch::isnan(target);
  const torch::Tensor p = pred.mean(0);
  const torch::Tensor zero = torch::zeros({}, target.options());
  const torch::Tensor diff = torch::where(valid, target, zero) - torch::where(valid, p, zero);
  torch::Tensor d = name == "mae" ? diff.abs() : diff.square();
  if (point_weights.defined()) d = d * point_weights.unsqueeze(1);
  const torch::Tensor per_channel = d.mean(0);
  const torch::Tensor loss = channel_weights.defined() ? (per_channel * channel_weights).mean() : per_channel.mean();
  return {loss, per_channel};
}

// gamma_decay: gamma^i renormalised to sum to the number of steps.
std::vector<double> step_weights(const std::string& fct, double gamma, int64_t steps) {
  std::vector<double> w(size_t(std::max<int64_t>(steps, 0)), 1.0);
  if (fct != "gamma_decay" || steps == 0) return w;
  double sum = 0;
  for (int64_t i = 0; i < steps; ++i) sum += (w[size_t(i)] = std::pow(gamma, double(i)));
  for (double& x : w) x *= double(steps) / sum;
  return w;
}
}  // namespace

PhysicalLoss::PhysicalLoss(const Config& c, const LossConfig& mode, const std::vector<StreamShape>& shapes,
                           bool training)
    : mode_(mode), forecast_offset_(c.forecast_offset), timestep_weight_(c.timestep_weight),
      timestep_gamma_(c.timestep_weight_param) {
  if (shapes.size() != c.streams.size()) throw std::invalid_argument("loss: stream shapes do not match the streams");
  for (size_t i = 0; i < shapes.size(); ++i) {
    const StreamConfig& sc = c.streams[i];
    Stream s;
    s.name = sc.name;
    s.num_channels = shapes[i].num_target_channels();
    s.substeps_by_time = sc.tokenize_spacetime;
    s.cosine_latitude = sc.location_weight == "cosine_latitude";
    if (training) {
      s.weight = sc.loss_weight;
      if (!sc.channel_weights.empty()) {
        s.channel_weights.assign(size_t(s.num_channels), 1.0);
        for (const auto& [channel, w] : sc.channel_weights) {
          bool found = false;
          for (int k = 0; k < s.num_channels; ++k)
            if (shapes[i].target_channels[size_t(k)] == channel) s.channel_weights[size_t(k)] = w, found = true;
          if (!found)
            throw std::invalid_argument("stream '" + sc.name + "' (" + sc.origin.str() + "): channel_weights names '" +
                                        channel + "', which is not one of its target channels");
        }
      }
    }
    streams_.push_back(s);
  }
}

PhysicalLossResult PhysicalLoss::operator()(const ModelBatch& batch,
                                            const std::vector<std::vector<torch::Tensor>>& preds) const {
  PhysicalLossResult out;
  const size_t S = streams_.size();
  const int64_t B = batch.num_samples;
  const size_t F = preds.size();
  const std::vector<double> fstep_weight = step_weights(timestep_weight_, timestep_gamma_, int64_t(F));
  const torch::Device device = batch.streams.empty() ? torch::Device(torch::kCPU) : batch.streams[0].target_coords[0].device();

  // Logging accumulators over samples: [s][fct] per channel, samples with data.
  std::vector<std::vector<torch::Tensor>> logged(S);
  std::vector<int> logged_samples(S, 0);
  torch::Tensor total;
  int samples_with_data = 0;
  bool nonfinite = false;  // a NaN / inf term: the loss is NaN (not "no data")

  for (int64_t b = 0; b < B; ++b) {
    torch::Tensor loss = torch::zeros({}, torch::TensorOptions().device(device));
    int ctr_streams = 0;
    for (size_t s = 0; s < S; ++s) {
      const Stream& st = streams_[s];
      const StreamBatchTensors& sb = batch.streams.at(s);
      const double spoof_weight = sb.weight.at(size_t(b));
      const torch::Tensor cw = st.channel_weights.empty()
                                   ? torch::Tensor()
                                   : torch::tensor(st.channel_weights, torch::kFloat64).to(torch::kFloat32).to(device);
      std::vector<torch::Tensor> chs(mode_.loss_fcts.size());
      torch::Tensor loss_fsteps = torch::zeros({}, torch::TensorOptions().device(device));
      int ctr_fsteps = 0;
      for (size_t i = 0; i < F; ++i) {
        const size_t f = size_t(forecast_offset_) + i;
        const torch::Tensor& pred_all = preds[i].at(s);
        const std::vector<int64_t>& points = sb.sample_points.at(f);
        int64_t first = 0;
        for (int64_t k = 0; k < b; ++k) first += points[size_t(k)];
        const int64_t P = points[size_t(b)];
        if (P == 0 || !pred_all.defined() || pred_all.size(1) == 0) continue;
        const torch::Tensor target = sb.target_values[f].narrow(0, first, P);
        const torch::Tensor pred = pred_all.narrow(1, first, P).to(target.scalar_type());
        // Sub-steps: one per distinct target time with tokenize_spacetime, else one.
        std::vector<torch::Tensor> masks;  // undefined: every point
        const std::vector<int64_t>& times = sb.target_times.at(f);
        std::map<int64_t, std::vector<int64_t>> by_time;
        if (st.substeps_by_time)
          for (int64_t p = 0; p < P; ++p) by_time[times[size_t(first + p)]].push_back(p);
        if (by_time.size() <= 1) {
          masks.emplace_back();
        } else {
          for (const auto& [t, rows] : by_time) masks.push_back(torch::tensor(rows, torch::kInt64).to(device));
        }
        torch::Tensor point_weights;
        if (st.cosine_latitude) {
          std::vector<float> w(static_cast<size_t>(P));
          for (int64_t p = 0; p < P; ++p)
            w[size_t(p)] = float((1.0 - 1e-3) * std::cos(double(sb.target_lat[f][size_t(first + p)]) * M_PI / 180.0) + 1e-3);
          point_weights = torch::tensor(w).to(device);
        }
        torch::Tensor loss_fstep = torch::zeros({}, torch::TensorOptions().device(device));
        int ctr_fcts = 0;
        for (size_t k = 0; k < mode_.loss_fcts.size(); ++k) {
          const LossTerm& term = mode_.loss_fcts[k];
          torch::Tensor loss_fct = torch::zeros({}, torch::TensorOptions().device(device));
          torch::Tensor chs_fct = torch::zeros({st.num_channels}, torch::TensorOptions().device(device));
          int ctr_substeps = 0;
          for (const torch::Tensor& m : masks) {
            const auto [l, c] =
                m.defined() ? loss_function(term.name, target.index_select(0, m), pred.index_select(1, m), cw,
                                            point_weights.defined() ? point_weights.index_select(0, m) : point_weights)
                            : loss_function(term.name, target, pred, cw, point_weights);
            loss_fct = loss_fct + l;
            chs_fct = chs_fct + c.detach();
            const double value = l.item<double>();
            nonfinite = nonfinite || !std::isfinite(value);
            ctr_substeps += value > 0.0 ? 1 : 0;
          }
          const double n_sub = ctr_substeps > 0 ? double(ctr_substeps) : 1.0;
          loss_fct = loss_fct / n_sub;
          chs_fct = chs_fct / n_sub;
          chs[k] = chs[k].defined() ? chs[k] + spoof_weight * chs_fct : spoof_weight * chs_fct;
          loss_fstep = loss_fstep + term.weight * loss_fct * st.weight * fstep_weight[i];
          ctr_fcts += loss_fct.item<double>() > 0.0 ? 1 : 0;
        }
        if (ctr_fcts > 0) {
          loss_fsteps = loss_fsteps + loss_fstep / double(ctr_fcts);
          ++ctr_fsteps;
        }
      }
      loss = loss + spoof_weight * loss_fsteps / (ctr_fsteps > 0 ? double(ctr_fsteps) : 1.0);
      if (ctr_fsteps > 0 && spoof_weight != 0.0) ++ctr_streams;
      if (ctr_fsteps > 0) {
        if (logged[s].empty()) logged[s].resize(mode_.loss_fcts.size());
        for (size_t k = 0; k < chs.size(); ++k) {
          const torch::Tensor v = chs[k] / double(ctr_fsteps);
          logged[s][k] = logged[s][k].defined() ? logged[s][k] + v : v;
        }
        ++logged_samples[s];
      }
    }
    if (ctr_streams == 0) continue;  // upstream divides by zero here; the sample has no data
    const torch::Tensor sample_loss = loss / double(ctr_streams);
    total = total.defined() ? total + sample_loss : sample_loss;
    ++samples_with_data;
  }
  if (samples_with_data > 0) out.loss = mode_.weight * total / double(samples_with_data);
  if (nonfinite) out.loss = torch::full({}, std::numeric_limits<double>::quiet_NaN(), torch::TensorOptions().device(device));

  for (size_t s = 0; s < S; ++s) {
    double stream_mean = kNaN;
    for (size_t k = 0; k < mode_.loss_fcts.size(); ++k) {
      out.names.push_back(streams_[s].name + "." + mode_.loss_fcts[k].name);
      std::vector<double> v(size_t(streams_[s].num_channels), kNaN);
      if (logged_samples[s] > 0 && logged[s][k].defined()) {
        const torch::Tensor mean = (logged[s][k] / double(logged_samples[s])).to(torch::kCPU, torch::kFloat64);
        double sum = 0;
        int n = 0;
        for (int c = 0; c < streams_[s].num_channels; ++c) {
          const double x = mean[c].item<double>();
          if (x != 0.0) v[size_t(c)] = x, sum += x, ++n;
        }
        if (k == 0 && n > 0) stream_mean = sum / n;
      }
      out.per_channel.push_back(std::move(v));
    }
    out.per_stream.push_back(stream_mean);
  }
  return out;
}

}  // namespace wg
