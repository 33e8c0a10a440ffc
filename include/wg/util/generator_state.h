// The state of LibTorch's random generators, taken and put back: the CPU
// generator and, for an accelerator, the device's. One type for every place
// that must replay or protect random draws (recomputation in backward,
// validation, training checkpoints).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

namespace wg {

class GeneratorStates {
 public:
  // The generators a computation on `device` may draw from (CPU always),
  // their states now.
  static GeneratorStates capture(const c10::Device& device);
  // The generators of capture(device), in its order (CPU first), from saved
  // states (uint8), one per generator.
  static GeneratorStates from(const c10::Device& device, const std::vector<at::Tensor>& states);

  void restore() const;
  const std::vector<at::Tensor>& states() const { return states_; }

 private:
  std::vector<at::Generator> generators_;
  std::vector<at::Tensor> states_;
};

// Restores the states captured at construction when it goes out of scope.
class GeneratorStatesGuard {
 public:
  explicit GeneratorStatesGuard(const c10::Device& device) : saved_(GeneratorStates::capture(device)) {}
  ~GeneratorStatesGuard() { saved_.restore(); }
  GeneratorStatesGuard(const GeneratorStatesGuard&) = delete;
  GeneratorStatesGuard& operator=(const GeneratorStatesGuard&) = delete;

 private:
  GeneratorStates saved_;
};

}  // namespace wg
