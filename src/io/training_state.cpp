// Training state <-> safetensors (see header).
#include "wg/io/training_state.h"

#include <c10/util/string_utils.h>
#include <torch/torch.h>

#include "wg/io/safetensors.h"
#include "wg/io/weights.h"

namespace wg {

namespace {
std::string state_key(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }
}  // namespace

void save_training_state(const std::string& path, const torch::nn::Module& model, torch::optim::AdamW& optimizer,
                         int64_t next_step) {
  SafetensorsFile f = weights_file(model, DType::F32, "model.");
  f.metadata["format"] = "wgtrain-training-state";
  f.metadata["next_step"] = std::to_string(next_step);
  auto& state = optimizer.state();
  for (const auto& p : model.named_parameters()) {
    auto it = state.find(state_key(p.value()));
    if (it == state.end()) continue;  // never updated yet
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    const std::string base = "optimizer." + p.key();
    f.tensors.push_back(to_record(base + ".exp_avg", s.exp_avg(), DType::F32));
    f.tensors.push_back(to_record(base + ".exp_avg_sq", s.exp_avg_sq(), DType::F32));
    f.tensors.push_back(to_record(base + ".step", torch::tensor(s.step(), torch::kInt64), DType::I64));
  }
  write_safetensors(path, f);
}

int64_t load_training_state(const std::string& path, torch::nn::Module& model, torch::optim::AdamW& optimizer) {
  const SafetensorsFile f = read_safetensors(path);
  auto step_it = f.metadata.find("next_step");
  if (f.metadata.count("format") == 0 || f.metadata.at("format") != "wgtrain-training-state" || step_it == f.metadata.end())
    throw SafetensorsError(path + ": not a wgtrain training state (metadata format/next_step missing)");
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
  if (!problems.empty()) throw WeightsMismatchError(path, problems);
  load_weights(model, f, {"model.", ""}, path);  // checks names and shapes itself

  auto& state = optimizer.state();
  for (const auto& [name, p] : params) {
    const TensorRecord* m = f.find("optimizer." + name + ".exp_avg");
    if (!m) continue;
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(to_tensor(*m).to(p.device(), p.scalar_type()));
    s->exp_avg_sq(to_tensor(*f.find("optimizer." + name + ".exp_avg_sq")).to(p.device(), p.scalar_type()));
    s->step(to_tensor(*f.find("optimizer." + name + ".step")).item<int64_t>());
    state[state_key(p)] = std::move(s);
  }
  return std::stoll(step_it->second);
}

}  // namespace wg
