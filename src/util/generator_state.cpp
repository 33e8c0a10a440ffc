// Generator states (see header). Each state is copied under the generator's
// own mutex: loader threads never draw from LibTorch's generators, but
// LibTorch's intra-op threads may.
#include "wg/util/generator_state.h"

#include <ATen/Context.h>

#include <mutex>

namespace wg {

namespace {
// The generators a computation on `device` may draw from: the CPU's, then the device's.
std::vector<at::Generator> generators_for(const c10::Device& device) {
  std::vector<at::Generator> g{at::globalContext().defaultGenerator(c10::DeviceType::CPU)};
  if (device.type() != c10::DeviceType::CPU) g.push_back(at::globalContext().defaultGenerator(device));
  return g;
}
}  // namespace

GeneratorStates GeneratorStates::capture(const c10::Device& device) {
  GeneratorStates s;
  s.generators_ = generators_for(device);
  for (auto& g : s.generators_) {
    std::lock_guard<std::mutex> lock(g.mutex());
    s.states_.push_back(g.get_state());
  }
  return s;
}

GeneratorStates GeneratorStates::from(const c10::Device& device, const std::vector<at::Tensor>& states) {
  GeneratorStates s;
  s.generators_ = generators_for(device);
  TORCH_CHECK(states.size() == s.generators_.size(), "GeneratorStates::from: ", states.size(), " states for ",
              s.generators_.size(), " generators");
  s.states_ = states;
  return s;
}

void GeneratorStates::restore() const {
  for (size_t i = 0; i < generators_.size(); ++i) {
    at::Generator g = generators_[i];
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(states_[i]);
  }
}

}  // namespace wg
