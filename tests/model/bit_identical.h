// Saving::Lean and recomputation against Saving::All, bit for bit: a run's
// output and every leaf's gradient, and their comparison (test_lean_ops.cpp,
// test_lean_layers.cpp).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace wg::testing {

// The output and the gradients of every leaf after backward of sum(out · seed).
inline std::vector<torch::Tensor> output_and_grads(const torch::Tensor& out, const std::vector<torch::Tensor>& leaves,
                                                   const torch::Tensor& seed) {
  (out * seed).sum().backward();
  std::vector<torch::Tensor> r{out.detach().clone()};
  for (const auto& l : leaves) r.push_back(l.grad().defined() ? l.grad().clone() : torch::Tensor());
  return r;
}

inline void expect_bit_identical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].defined(), b[i].defined()) << "tensor " << i;
    if (a[i].defined()) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i << " (0: the output)";
  }
}

}  // namespace wg::testing
