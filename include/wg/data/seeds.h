// Deriving independent random seeds: a seed and a number (or a name) give a
// new well-mixed 64-bit seed (splitmix64 finaliser; FNV-1a for names). Pure
// functions, the same on every platform. No LibTorch.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

uint64_t mix_seed(uint64_t a, uint64_t b);
uint64_t hash_name(const std::string& name);

}  // namespace wg
