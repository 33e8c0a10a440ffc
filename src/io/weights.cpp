// Weights <-> safetensors or torch.save checkpoints (see header).
#include "wg/io/weights.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "wg/io/chkpt.h"

namespace wg {

namespace {
torch::ScalarType scalar_type(DType d) {
  switch (d) {
    case DType::F32: return torch::kFloat32;
    case DType::F16: return torch::kFloat16;
    case DType::BF16: return torch::kBFloat16;
    case DType::F64: return torch::kFloat64;
    case DType::I64: return torch::kInt64;
    case DType::U8: return torch::kUInt8;
  }
  return torch::kFloat32;
}

std::string shape_str(torch::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "\n  " + l;
  return s;
}
}  // namespace

WeightsMismatchError::WeightsMismatchError(const std::string& what, std::vector<std::string> problems)
    : std::runtime_error(what + ": " + std::to_string(problems.size()) + " problem(s), nothing loaded:" + join(problems)),
      problems_(std::move(problems)) {}

TensorRecord to_record(const std::string& name, const torch::Tensor& t, DType dtype) {
  torch::Tensor c = t.detach().to(torch::kCPU, scalar_type(dtype)).contiguous();
  TensorRecord r;
  r.name = name;
  r.dtype = dtype;
  r.shape.assign(c.sizes().begin(), c.sizes().end());
  r.data.resize(c.numel() * c.element_size());
  std::memcpy(r.data.data(), c.data_ptr(), r.data.size());
  return r;
}

torch::Tensor to_tensor(const TensorRecord& r) {
  torch::Tensor t = torch::empty(r.shape, torch::TensorOptions().dtype(scalar_type(r.dtype)));
  std::memcpy(t.data_ptr(), r.data.data(), r.data.size());
  return t;
}

SafetensorsFile weights_file(const torch::nn::Module& module, DType dtype, const std::string& prefix) {
  SafetensorsFile f;
  f.metadata["format"] = "pt";
  for (const auto& p : module.named_parameters()) f.tensors.push_back(to_record(prefix + p.key(), p.value(), dtype));
  return f;
}

void save_weights(const torch::nn::Module& module, const std::string& path, DType dtype) {
  write_safetensors(path, weights_file(module, dtype));
}

void save_weights_chkpt(const torch::nn::Module& module, const std::string& path) {
  write_chkpt(path, weights_file(module, DType::F32));
}

WeightsMapping parse_weights_mapping(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos) return {spec, spec};
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

int load_weights(torch::nn::Module& module, const SafetensorsFile& file, const WeightsMapping& m,
                 const std::string& what) {
  auto starts = [](const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; };
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : module.named_parameters())
    if (starts(p.key(), m.model_prefix)) params[p.key().substr(m.model_prefix.size())] = p.value();
  std::map<std::string, const TensorRecord*> stored;
  for (const auto& r : file.tensors)
    if (starts(r.name, m.file_prefix)) stored[r.name.substr(m.file_prefix.size())] = &r;

  std::vector<std::string> problems;
  for (const auto& [name, p] : params) {
    auto it = stored.find(name);
    if (it == stored.end()) {
      problems.push_back("missing: " + m.file_prefix + name + " " + shape_str(p.sizes()));
      continue;
    }
    const TensorRecord& r = *it->second;
    if (r.dtype == DType::I64 || r.dtype == DType::U8)
      problems.push_back(std::string("wrong dtype: ") + r.name + " is " + dtype_name(r.dtype) +
                         ", parameters are floating point");
    if (torch::IntArrayRef(r.shape) != p.sizes())
      problems.push_back("wrong shape: " + r.name + " is " + shape_str(r.shape) + ", the model's " + m.model_prefix +
                         name + " is " + shape_str(p.sizes()));
  }
  for (const auto& [name, r] : stored)
    if (!params.count(name)) problems.push_back("unexpected: " + r->name + " " + shape_str(r->shape));
  if (params.empty()) problems.push_back("the model has no parameters under '" + m.model_prefix + "'");
  if (!problems.empty()) throw WeightsMismatchError(what, problems);

  torch::NoGradGuard no_grad;
  for (auto& [name, p] : params) p.copy_(to_tensor(*stored.at(name)).to(p.device(), p.scalar_type()));
  return int(params.size());
}

int load_weights(torch::nn::Module& module, const std::string& path, const WeightsMapping& mapping) {
  if (!is_chkpt_file(path)) return load_weights(module, read_safetensors(path), mapping, path);
  SafetensorsFile file = read_chkpt(path);
  // A DistributedDataParallel model's state_dict: every name under "module.".
  const std::string ddp = "module.";
  const bool wrapped = !file.tensors.empty() &&
                       std::all_of(file.tensors.begin(), file.tensors.end(),
                                   [&](const TensorRecord& r) { return r.name.compare(0, ddp.size(), ddp) == 0; });
  if (wrapped)
    for (auto& r : file.tensors) r.name.erase(0, ddp.size());
  return load_weights(module, file, mapping, path);
}

}  // namespace wg
