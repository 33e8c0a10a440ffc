// The key of a parameter in a torch::optim optimizer's state map.
//
// LibTorch keys that map by the parameter's TensorImpl: as a string made by
// c10::guts::to_string up to 2.1, as the pointer itself from 2.2 on (which
// removed c10::guts::to_string). Checkpoints are unaffected: the training
// state names each moment after its parameter (wg/io/training_state.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
namespace wg {
inline void* optimizer_state_key(const at::Tensor& p) { return p.unsafeGetTensorImpl(); }
}  // namespace wg
#else
#include <c10/util/C++17.h>

#include <string>

namespace wg {
inline std::string optimizer_state_key(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }
}  // namespace wg
#endif
