// Dropout on the CPU whose keep-mask is a pure function of a seed and the
// element's index: element j of a draw with seed s is kept (and scaled by
// 1 / (1 - p)) iff hash(s, j) / 2^32 < 1 - p.
//
// Why not torch::dropout: on a CPU build without MKL (Debian's LibTorch)
// its bernoulli_ draws element by element from one locked mt19937, serially
// (measured: a tenth of a step at an ERA5-shaped embed), and autograd keeps
// the float mask for backward. Here the mask is made in parallel, needs no
// lock, and is never kept: backward makes it again from the seed. The seed
// is drawn from the default CPU generator, so a recomputed piece (its
// generator states restored, recompute.h) draws the same masks, and a
// resumed run (its generator state restored) the same as an uninterrupted
// one. The masks do not depend on the thread count.
//
// The distribution is dropout's (each element kept independently with
// probability 1 - p, to within 2^-32); the draws differ from PyTorch's.
// Off the CPU, and for dtypes other than float32/float64, dropout() is
// torch::dropout.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace wg {

// A seed from the default CPU generator (one draw).
uint64_t draw_dropout_seed();

// x with dropout p (training and p > 0), else x. Differentiable; keeps no mask.
torch::Tensor dropout(const torch::Tensor& x, double p, bool training);

// t *= mask(seed, p), in place, t contiguous float32/float64 on the CPU,
// its element j taking draw `offset + j` (so a kernel that works through
// a mask in tiles gets the mask of the whole): for kernels with their own
// backward (the attention core).
void apply_dropout_mask_(torch::Tensor& t, uint64_t seed, double p, int64_t offset = 0);

// The same into a new contiguous tensor: t · mask(seed, p), t left as it
// is (one pass where a copy and apply_dropout_mask_ take two).
torch::Tensor dropout_masked(const torch::Tensor& t, uint64_t seed, double p, int64_t offset = 0);

// A mask's elements [offset, offset + n) drawn once, as one byte each, for
// a kernel that applies the same mask to several tensors (the attention
// kernel's backward: the probabilities and their gradient; a core run
// again: its output too). apply_ and applied give the bits
// apply_dropout_mask_ and dropout_masked give with (seed, p, offset):
// the hashes are the dominant cost of a mask, and are made once.
class DropoutKeeps {
 public:
  DropoutKeeps(int64_t n, uint64_t seed, double p, int64_t offset = 0);
  // t *= mask, in place (t contiguous float32/float64 CPU, n elements).
  void apply_(torch::Tensor& t) const;
  // t · mask into a new contiguous tensor.
  torch::Tensor applied(const torch::Tensor& t) const;
  int64_t size() const { return size_; }

 private:
  void scale(const torch::Tensor& in, torch::Tensor& out) const;
  std::unique_ptr<uint8_t[]> keep_;
  int64_t size_;
  double p_;
};

// The mask itself (0 or 1 / (1 - p)), shaped and typed like `like`: for tests.
torch::Tensor dropout_mask(uint64_t seed, double p, const torch::Tensor& like);

}  // namespace wg
