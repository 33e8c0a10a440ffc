// A backward that throws leaves its graph held by the engine's leftover
// tasks until the next backward; release_failed_backward lets it go
// (src/util/failed_backward.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "wg/util/failed_backward.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

struct ThrowingBackward : public torch::autograd::Function<ThrowingBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list) {
    throw std::runtime_error("backward fails here");
  }
};

int64_t in_use() { return memory_snapshot("cpu").current_bytes; }

// Two branches from x: the one created last (the highest sequence numbers,
// so the engine runs it first) throws; the other's task, ready by then,
// stays queued holding its 3 saved tensors of 4 MiB each.
void failing_backward() {
  const torch::Tensor x = torch::randn({int64_t(1) << 20}, torch::requires_grad());
  torch::Tensor kept = x.exp().exp().exp().sum();
  torch::Tensor throws = ThrowingBackward::apply(x * 3).sum();
  torch::Tensor loss = kept + throws;
  EXPECT_THROW(loss.backward(), std::runtime_error);
}

TEST(FailedBackward, ItsGraphIsHeldUntilReleased) {
  install_counting_allocator();
  const torch::AutoGradMode on(true);
  const int64_t before = in_use();
  failing_backward();
  const int64_t held = in_use() - before;
  EXPECT_GE(held, int64_t(8) << 20) << "the engine's leftover tasks hold the other branch's graph";
  release_failed_backward(torch::kCPU);
  EXPECT_LT(in_use() - before, int64_t(1) << 20);
}

TEST(FailedBackward, ReleasingWithNothingLeftOverChangesNothing) {
  install_counting_allocator();
  const int64_t before = in_use();
  release_failed_backward(torch::kCPU);
  EXPECT_LE(in_use(), before);
  const torch::Tensor x = torch::ones({3}, torch::requires_grad());
  (x * x).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), 2 * torch::ones({3})));
  release_failed_backward(torch::kCPU);
  EXPECT_TRUE(torch::equal(x.grad(), 2 * torch::ones({3})));  // no gradient touched
}

}  // namespace
}  // namespace wg
