// wg::dropout (wg/model/dropout.h): dropout's distribution, masks that
// depend only on the seed (not on threads or on draws made since), a
// backward that is the same mask, NaN kept where dropped, nothing kept for
// backward, and the seed from the CPU generator (so a restored generator
// draws the same mask).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../common/thread_count.h"
#include "wg/model/dropout.h"
#include "wg/util/generator_state.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

TEST(Dropout, KeepsEachElementWithProbabilityOneMinusP) {
  const torch::Tensor ones = torch::ones({1 << 20});
  for (const double p : {0.1, 0.3, 0.5}) {
    SCOPED_TRACE(p);
    const torch::Tensor m = dropout_mask(1234, p, ones);
    const double kept = (m != 0).to(torch::kDouble).mean().item<double>();
    // 2^20 Bernoulli draws: the standard deviation of the kept share is under 5e-4.
    EXPECT_NEAR(kept, 1 - p, 3e-3);
    EXPECT_TRUE(torch::all((m == 0) | (m == float(1 / (1 - p)))).item<bool>());
    // Neighbouring elements are not correlated (a counter hashed, not a short period).
    const torch::Tensor k = (m != 0).to(torch::kDouble);
    const double both = (k.slice(0, 1) * k.slice(0, 0, -1)).mean().item<double>();
    EXPECT_NEAR(both, (1 - p) * (1 - p), 3e-3);
  }
  EXPECT_FALSE(torch::equal(dropout_mask(1, 0.5, ones), dropout_mask(2, 0.5, ones)));
}

TEST(Dropout, TheMaskDependsOnTheSeedNotOnTheThreads) {
  const torch::Tensor x = torch::randn({300, 1000});
  const std::vector<torch::Tensor> out = testing::on_each_thread_count({1, 2, 4}, [&] {
    torch::manual_seed(7);
    return wg::dropout(x, 0.2, true);
  });
  EXPECT_TRUE(torch::equal(out[0], out[1]));
  EXPECT_TRUE(torch::equal(out[0], out[2]));
  torch::manual_seed(7);
  torch::randn({3});  // another draw first: another seed
  EXPECT_FALSE(torch::equal(out[0], wg::dropout(x, 0.2, true)));
}

TEST(Dropout, BackwardIsTheSameMaskAndNothingIsKept) {
  install_counting_allocator();
  const torch::Tensor x = torch::randn({64, 256}, torch::kDouble).requires_grad_(true);
  const int64_t before = memory_snapshot("cpu").current_bytes;
  torch::Tensor y = wg::dropout(x, 0.25, true);
  EXPECT_EQ(memory_snapshot("cpu").current_bytes - before, y.nbytes());  // the output alone
  const torch::Tensor g = torch::randn_like(y);
  y.backward(g);
  const torch::Tensor m = (y.detach() / x.detach());  // the mask (x has no zeros)
  EXPECT_TRUE(torch::allclose(x.grad(), g * m, 0, 1e-14));
  EXPECT_TRUE(torch::equal(x.grad() == 0, y.detach() == 0));
}

// Element j's draw is half of the hash output j / 2 (dropout_draw.h): a
// mask begun at an offset, odd or even, inside a block or across blocks'
// edges, is the tail of the mask begun at 0.
TEST(Dropout, AMaskAtAnOffsetIsTheTailOfTheWholeMask) {
  const torch::Tensor whole = dropout_mask(99, 0.3, torch::ones({5000}));
  for (const int64_t offset : {1, 2, 3, 511, 512, 513, 1023}) {
    torch::Tensor tail = torch::ones({5000 - offset});
    apply_dropout_mask_(tail, 99, 0.3, offset);
    EXPECT_TRUE(torch::equal(tail, whole.slice(0, offset))) << "offset " << offset;
  }
}

// The out-of-place form (the attention kernel's backward keeps the
// probabilities and masks a copy) gives apply_dropout_mask_'s bits and
// leaves its input as it was.
TEST(Dropout, AMaskedCopyEqualsTheMaskAppliedInPlace) {
  torch::manual_seed(5);
  for (const auto dtype : {torch::kFloat, torch::kDouble})
    for (const int64_t offset : {0, 7, 4096}) {
      const torch::Tensor x = torch::randn({3, 79, 79}, dtype), before = x.clone();
      torch::Tensor in_place = x.clone();
      apply_dropout_mask_(in_place, 42, 0.1, offset);
      const torch::Tensor copy = dropout_masked(x, 42, 0.1, offset);
      EXPECT_TRUE(torch::equal(copy, in_place)) << dtype << " offset " << offset;
      EXPECT_TRUE(torch::equal(x, before));
      EXPECT_FALSE(torch::equal(copy, x));  // some elements were dropped
    }
}

// A mask drawn once as bytes (the attention kernel's backward applies it
// to two tiles, a joint pass to three) gives the bits of drawing it each
// time, in place and into a copy, at odd and even offsets, with NaN,
// infinities and signed zeros, over several of the parallel loop's tasks.
TEST(Dropout, AMaskDrawnOnceAsBytesGivesTheBitsOfDrawingItEachTime) {
  torch::manual_seed(11);
  for (const auto dtype : {torch::kFloat, torch::kDouble})
    for (const int64_t offset : {0, 1, 513, 40001}) {
      SCOPED_TRACE(std::to_string(offset));
      torch::Tensor x = torch::randn({50000}, dtype);
      x[0] = std::nan("");
      x[1] = std::nan("");
      x[2] = -0.0;
      x[3] = INFINITY;
      x[4] = -INFINITY;
      const torch::Tensor before = x.clone();
      const DropoutKeeps keeps(x.numel(), 42, 0.3, offset);
      const torch::Tensor drawn = dropout_masked(x, 42, 0.3, offset), copy = keeps.applied(x);
      torch::Tensor in_place = x.clone();
      keeps.apply_(in_place);
      const auto bits = [](const torch::Tensor& t) {
        return t.scalar_type() == torch::kFloat ? t.view(torch::kInt32) : t.view(torch::kInt64);
      };
      EXPECT_TRUE(torch::equal(bits(copy), bits(drawn)));
      EXPECT_TRUE(torch::equal(bits(in_place), bits(drawn)));
      EXPECT_TRUE(torch::equal(bits(x), bits(before)));
    }
  const DropoutKeeps keeps(10, 1, 0.5);
  torch::Tensor wrong = torch::ones({11});
  EXPECT_THROW(keeps.apply_(wrong), c10::Error);
  EXPECT_THROW(DropoutKeeps(10, 1, 0.0), c10::Error);
}

TEST(Dropout, ANaNStaysANaNWhereDropped) {
  const torch::Tensor x = torch::full({4096}, std::nan(""));
  torch::manual_seed(3);
  EXPECT_TRUE(torch::all(torch::isnan(wg::dropout(x, 0.5, true))).item<bool>());  // as torch's x · mask
}

TEST(Dropout, OffInEvaluationAndAtRateZero) {
  const torch::Tensor x = torch::randn({10});
  EXPECT_TRUE(wg::dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(wg::dropout(x, 0.0, true).is_same(x));
  EXPECT_THROW(wg::dropout(x, 1.0, true), c10::Error);
}

TEST(Dropout, ARestoredGeneratorDrawsTheSameMask) {
  const torch::Tensor x = torch::randn({1000});
  const GeneratorStates state = GeneratorStates::capture(torch::kCPU);
  const torch::Tensor a = wg::dropout(x, 0.5, true);
  state.restore();
  EXPECT_TRUE(torch::equal(a, wg::dropout(x, 0.5, true)));
}

}  // namespace
}  // namespace wg
