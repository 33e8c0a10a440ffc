// Mixed precision as upstream runs it (wg-model.md §7, §10.4): the forward
// inside CUDA autocast in attention_dtype when with_mixed_precision is on;
// nothing on CPU (fp32 there). RAII: restores the previous state and drops
// autocast's cast cache on exit.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace wg {

// Whether CUDA autocast is on in this thread (what a product that must be
// made again with the same bits has to know).
bool autocast_enabled();

class AutocastGuard {
 public:
  // enabled: with_mixed_precision on a CUDA device. dtype: bf16 | fp16 | fp32
  // (fp32: no autocast).
  AutocastGuard(bool enabled, const std::string& dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  bool active() const { return active_; }

 private:
  bool active_ = false;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::Half;
};

}  // namespace wg
