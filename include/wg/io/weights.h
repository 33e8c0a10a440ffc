// Model weights <-> safetensors or torch.save checkpoints (.chkpt, see
// io/chkpt.h), with tensor names exactly as the module's named_parameters()
// (= a PyTorch state_dict) spells them.
#pragma once

#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "wg/io/safetensors.h"

namespace wg {

// Every problem of a load, all at once; nothing was loaded.
class WeightsMismatchError : public std::runtime_error {
 public:
  WeightsMismatchError(const std::string& what, std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

TensorRecord to_record(const std::string& name, const torch::Tensor& t, DType dtype);
torch::Tensor to_tensor(const TensorRecord& r);  // CPU, in the stored dtype

// Parameters of `module` as records named `prefix + name`.
SafetensorsFile weights_file(const torch::nn::Module& module, DType dtype = DType::F32, const std::string& prefix = "");
void save_weights(const torch::nn::Module& module, const std::string& path, DType dtype = DType::F32);
// As torch.save(model.state_dict(), path) would (F32, named_parameters()
// order): torch.load(path, weights_only=True) + load_state_dict(strict=True).
void save_weights_chkpt(const torch::nn::Module& module, const std::string& path);

// Which tensors of a file go where: those named `file_prefix + X` load into
// the parameter `model_prefix + X`. Only parameters under model_prefix take
// part (an empty prefix: all of them), so a larger checkpoint can
// initialise one section or stream.
struct WeightsMapping {
  std::string file_prefix;
  std::string model_prefix;
};
// "P" -> {P, P}; "P=Q" -> {P, Q}.
WeightsMapping parse_weights_mapping(const std::string& spec);

// Checks every name and shape first (missing, unexpected, wrong shape: all
// reported in one WeightsMismatchError); only then copies, converting the
// stored dtype to the parameter's. Returns the number of tensors loaded.
int load_weights(torch::nn::Module& module, const SafetensorsFile& file, const WeightsMapping& mapping = {},
                 const std::string& what = "weights");
// A torch.save zip archive (is_chkpt_file) is read with read_chkpt, anything
// else as safetensors. A checkpoint whose names all start with "module." (a
// DistributedDataParallel model's save) loads without that prefix.
int load_weights(torch::nn::Module& module, const std::string& path, const WeightsMapping& mapping = {});

}  // namespace wg
