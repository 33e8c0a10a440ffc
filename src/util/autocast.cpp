// CUDA autocast (see header). The API moved in PyTorch 2.4 (device-typed
// calls); both spellings are supported so the code builds against Debian's
// LibTorch 1.13 and a GPU machine's current PyTorch.
#include "wg/util/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace wg {

namespace {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool enabled() { return at::autocast::is_autocast_enabled(at::kCUDA); }
void set_enabled(bool on) { at::autocast::set_autocast_enabled(at::kCUDA, on); }
c10::ScalarType dtype() { return at::autocast::get_autocast_dtype(at::kCUDA); }
void set_dtype(c10::ScalarType t) { at::autocast::set_autocast_dtype(at::kCUDA, t); }
#else
bool enabled() { return at::autocast::is_enabled(); }
void set_enabled(bool on) { at::autocast::set_enabled(on); }
c10::ScalarType dtype() { return at::autocast::get_autocast_gpu_dtype(); }
void set_dtype(c10::ScalarType t) { at::autocast::set_autocast_gpu_dtype(t); }
#endif
}  // namespace

bool autocast_enabled() { return enabled(); }

AutocastGuard::AutocastGuard(bool on, const std::string& name) {
  if (!on || name == "fp32") return;
  was_enabled_ = enabled();
  was_dtype_ = dtype();
  set_dtype(name == "fp16" ? c10::ScalarType::Half : c10::ScalarType::BFloat16);
  set_enabled(true);
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  set_enabled(was_enabled_);
  set_dtype(was_dtype_);
  if (!was_enabled_) at::autocast::clear_cache();
}

}  // namespace wg
