// Training state <-> safetensors (see header).
#include "wg/io/training_state.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "wg/io/safetensors.h"
#include "wg/io/weights.h"
#include "wg/util/optimizer_state_key.h"

namespace wg {

void save_training_state(const std::string& path, const torch::nn::Module& model, torch::optim::AdamW& optimizer,
                         int64_t next_step, const std::vector<torch::Tensor>& ema,
                         std::optional<LossScaleState> loss_scale) {
  SafetensorsFile f = weights_file(model, DType::F32, "model.");
  f.metadata["format"] = "wgtrain-training-state";
  f.metadata["next_step"] = std::to_string(next_step);
  if (loss_scale) {
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", loss_scale->scale);  // exact: reads back to the same double
    f.metadata["loss_scale"] = text;
    f.metadata["loss_scale_growth_tracker"] = std::to_string(loss_scale->growth_tracker);
  }
  auto& state = optimizer.state();
  for (const auto& p : model.named_parameters()) {
    auto it = state.find(optimizer_state_key(p.value()));
    if (it == state.end()) continue;  // never updated yet
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    const std::string base = "optimizer." + p.key();
    f.tensors.push_back(to_record(base + ".exp_avg", s.exp_avg(), DType::F32));
    f.tensors.push_back(to_record(base + ".exp_avg_sq", s.exp_avg_sq(), DType::F32));
    f.tensors.push_back(to_record(base + ".step", torch::tensor(s.step(), torch::kInt64), DType::I64));
  }
  const auto named = model.named_parameters();
  if (!ema.empty() && ema.size() != named.size())
    throw std::invalid_argument("training state: " + std::to_string(ema.size()) + " averaged tensors for " +
                                std::to_string(named.size()) + " parameters");
  for (size_t i = 0; i < ema.size(); ++i)
    f.tensors.push_back(to_record("ema." + named[i].key(), ema[i], DType::F32));
  write_safetensors(path, f);
}

int64_t load_training_state(const std::string& path, torch::nn::Module& model, torch::optim::AdamW& optimizer,
                            std::vector<torch::Tensor>* ema, std::optional<LossScaleState>* loss_scale) {
  const SafetensorsFile f = read_safetensors(path);
  auto step_it = f.metadata.find("next_step");
  if (f.metadata.count("format") == 0 || f.metadata.at("format") != "wgtrain-training-state" || step_it == f.metadata.end())
    throw SafetensorsError(path + ": not a wgtrain training state (metadata format/next_step missing)");
  std::optional<LossScaleState> scale;
  if (f.metadata.count("loss_scale")) {
    const std::string& text = f.metadata.at("loss_scale");
    const auto tracker = f.metadata.find("loss_scale_growth_tracker");
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(value > 0) || !std::isfinite(value) || tracker == f.metadata.end() ||
        tracker->second.empty() || tracker->second.find_first_not_of("0123456789") != std::string::npos)
      throw SafetensorsError(path + ": metadata loss_scale '" + text + "' (with loss_scale_growth_tracker '" +
                             (tracker == f.metadata.end() ? std::string("<missing>") : tracker->second) +
                             "') is not a positive finite scale and a count");
    scale = LossScaleState{value, std::stoll(tracker->second)};
  }
  // Optimizer moments must come in complete triples for known parameters.
  std::vector<std::string> problems;
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : model.named_parameters()) params[p.key()] = p.value();
  for (const auto& r : f.tensors) {
    if (r.name.rfind("optimizer.", 0) != 0) continue;
    const std::string rest = r.name.substr(10);
    const auto dot = rest.rfind('.');
    const std::string pname = rest.substr(0, dot);
    if (!params.count(pname)) problems.push_back("unexpected: " + r.name);
    else if (!f.find("optimizer." + pname + ".exp_avg") || !f.find("optimizer." + pname + ".exp_avg_sq") ||
             !f.find("optimizer." + pname + ".step"))
      problems.push_back("incomplete optimizer state for " + pname);
    else if (rest.substr(dot + 1) != "step" && torch::IntArrayRef(r.shape) != params[pname].sizes())
      problems.push_back("wrong shape: " + r.name);
  }
  const auto named = model.named_parameters();
  if (ema) {
    if (ema->size() != named.size()) problems.push_back("the weight average has " + std::to_string(ema->size()) + " tensors");
    for (const auto& p : named) {
      const TensorRecord* r = f.find("ema." + p.key());
      if (!r) problems.push_back("missing: ema." + p.key() + " (the run averages weights: validate_with_ema)");
      else if (torch::IntArrayRef(r->shape) != p.value().sizes()) problems.push_back("wrong shape: ema." + p.key());
    }
  }
  if (!problems.empty()) throw WeightsMismatchError(path, problems);
  load_weights(model, f, {"model.", ""}, path);  // checks names and shapes itself
  if (ema) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < named.size(); ++i) (*ema)[i].copy_(to_tensor(*f.find("ema." + named[i].key())));
  }

  auto& state = optimizer.state();
  for (const auto& [name, p] : params) {
    const TensorRecord* m = f.find("optimizer." + name + ".exp_avg");
    if (!m) continue;
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(to_tensor(*m).to(p.device(), p.scalar_type()));
    s->exp_avg_sq(to_tensor(*f.find("optimizer." + name + ".exp_avg_sq")).to(p.device(), p.scalar_type()));
    s->step(to_tensor(*f.find("optimizer." + name + ".step")).item<int64_t>());
    state[optimizer_state_key(p)] = std::move(s);
  }
  if (loss_scale) *loss_scale = scale;
  return std::stoll(step_it->second);
}

}  // namespace wg
