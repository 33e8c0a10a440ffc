// Saving::Lean in the products (wg/model/lean_ops.h): fused_linear and
// grouped_linear equal to separate plain products, and bit-identical to
// Saving::All with and without a dropout prelude; the preludes' reruns
// against autograd; output_linear under Saving::Rerun (gradients without
// its product; a joint prelude run only in backward); a lean product's
// refusal of a second backward; and the weights' dtype under autocast.
// The attention and MLP layers built on them: test_lean_layers.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>

#include <functional>
#include <vector>

#include "wg/model/lean_ops.h"

#include "bit_identical.h"

namespace wg {
namespace {

using testing::expect_bit_identical;
using testing::output_and_grads;

struct Leaves {
  torch::Tensor x, ln_w, ln_b, w1, w2, w3, b1, b2, b3;
  std::vector<torch::Tensor> all() const { return {x, ln_w, ln_b, w1, w2, w3, b1, b2, b3}; }
  void zero() {
    for (auto& t : all()) t.mutable_grad() = torch::Tensor();
  }
};

Leaves leaves(torch::ScalarType dtype) {
  torch::manual_seed(5);
  const auto leaf = [&](std::vector<int64_t> shape) {
    return torch::randn(shape, torch::TensorOptions().dtype(dtype)).requires_grad_(true);
  };
  return {leaf({3, 7, 16}), leaf({16}), leaf({16}), leaf({8, 16}), leaf({12, 16}), leaf({8, 16}),
          leaf({8}),        leaf({12}), leaf({8})};
}

Prelude affine_norm(const Leaves& l) {
  Prelude pre;
  pre.fn = [w = l.ln_w, b = l.ln_b](const torch::Tensor& t) { return torch::layer_norm(t, {t.size(-1)}, w, b, 1e-5); };
  pre.params = {l.ln_w, l.ln_b};
  return pre;
}

TEST(LeanOps, FusedLinearEqualsSeparateProducts) {
  Leaves l = leaves(torch::kFloat64);
  const torch::Tensor seed = torch::randn({3, 7, 28}, torch::kFloat64);
  for (const Saving saving : {Saving::All, Saving::Lean}) {
    SCOPED_TRACE(saving == Saving::Lean ? "lean" : "all");
    l.zero();
    const auto got = output_and_grads(fused_linear(l.x, affine_norm(l), {l.w1, l.w2, l.w3}, {l.b1, l.b2, l.b3}, saving),
                                      l.all(), seed);
    l.zero();
    const torch::Tensor h = affine_norm(l).fn(l.x);
    const torch::Tensor plain =
        torch::cat({torch::linear(h, l.w1, l.b1), torch::linear(h, l.w2, l.b2), torch::linear(h, l.w3, l.b3)}, -1);
    const auto want = output_and_grads(plain, l.all(), seed);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-12, 1e-12)) << "tensor " << i;
  }
}

// Both ways a drawing prelude runs again: replayed under autograd (a
// prelude without a rerun: torch::dropout) and by its rerun (the MLP's
// gelu_dropout_prelude, wg::gelu_dropout), the generators as at the first run.
TEST(LeanOps, LeanIsBitIdenticalToAllWithADropoutPrelude) {
  Prelude replayed;
  replayed.fn = [](const torch::Tensor& t) { return torch::dropout(torch::gelu(t), 0.3, true); };
  replayed.draws_random = true;
  const std::vector<std::pair<const char*, Prelude>> cases = {{"replayed under autograd", replayed},
                                                              {"rerun", gelu_dropout_prelude(0.3, true)}};
  for (const auto& [name, act] : cases) {
    SCOPED_TRACE(name);
    Leaves l = leaves(torch::kFloat32);
    const torch::Tensor seed = torch::randn({3, 7, 12});
    const torch::Tensor w_out = torch::randn({12, 8}).requires_grad_(true);
    std::vector<torch::Tensor> wrt = l.all();
    wrt.push_back(w_out);
    std::vector<std::vector<torch::Tensor>> runs;
    for (const Saving saving : {Saving::All, Saving::Lean}) {
      l.zero();
      w_out.mutable_grad() = torch::Tensor();
      torch::manual_seed(42);  // the same masks in forward
      const torch::Tensor u = fused_linear(l.x, affine_norm(l), {l.w1}, {l.b1}, saving);
      const torch::Tensor y = fused_linear(u, act, {w_out}, {l.b2}, saving);
      torch::randn({100});  // draws between forward and backward do not change the replayed mask
      runs.push_back(output_and_grads(y, wrt, seed));
    }
    expect_bit_identical(runs[0], runs[1]);
    EXPECT_GT(runs[0][1].abs().sum().item<double>(), 0.0);  // gradients reached x
  }
}

// output_linear, a piece's last product: fused_linear under All and Lean;
// under Rerun (a recomputation's second run) no product, zeros for its
// output, and the same gradients, bit for bit, through a residual sum.
TEST(LeanOps, OutputLinearLeavesItsProductOutOnlyInARerun) {
  Leaves l = leaves(torch::kFloat32);
  const torch::Tensor seed = torch::randn({3, 7, 12});
  const torch::Tensor w_out = torch::randn({12, 8}).requires_grad_(true);
  const torch::Tensor residual = torch::randn({3, 7, 12}).requires_grad_(true);
  std::vector<torch::Tensor> wrt = l.all();
  wrt.insert(wrt.end(), {w_out, residual});
  std::vector<std::vector<torch::Tensor>> grads;
  for (const Saving saving : {Saving::All, Saving::Lean, Saving::Rerun}) {
    SCOPED_TRACE(int(saving));
    for (const torch::Tensor& t : wrt) t.mutable_grad() = torch::Tensor();
    torch::manual_seed(42);
    const torch::Tensor u = fused_linear(l.x, affine_norm(l), {l.w1}, {l.b1}, saving);
    const torch::Tensor y = output_linear(u, gelu_dropout_prelude(0.3, true), {w_out}, {l.b2}, saving);
    torch::manual_seed(42);
    const torch::Tensor u_plain = fused_linear(l.x, affine_norm(l), {l.w1}, {l.b1}, Saving::All);
    const torch::Tensor plain = fused_linear(u_plain, gelu_dropout_prelude(0.3, true), {w_out}, {l.b2}, Saving::All);
    EXPECT_TRUE(torch::equal(y.detach(), saving == Saving::Rerun ? torch::zeros_like(plain) : plain.detach()));
    std::vector<torch::Tensor> r = output_and_grads(y + residual, wrt, seed);
    r.erase(r.begin());  // the outputs differ by design
    grads.push_back(r);
  }
  expect_bit_identical(grads[0], grads[1]);
  expect_bit_identical(grads[0], grads[2]);
  EXPECT_GT(grads[2][0].abs().sum().item<double>(), 0.0);  // gradients reached x
}

// grouped_linear (the embed's per-channel read-out) against one plain
// product per group, with the per-channel affine norm as its prelude.
TEST(LeanOps, GroupedLinearEqualsOneProductPerGroup) {
  torch::manual_seed(8);
  const int64_t N = 5, G = 4, in = 16, out = 3;
  const auto leaf = [](std::vector<int64_t> s) { return torch::randn(s, torch::kFloat64).requires_grad_(true); };
  const torch::Tensor x = leaf({N, G, in});
  std::vector<torch::Tensor> ln_w, ln_b, w, b, wrt{x};
  for (int64_t g = 0; g < G; ++g) {
    ln_w.push_back(leaf({in}));
    ln_b.push_back(leaf({in}));
    w.push_back(leaf({out, in}));
    b.push_back(leaf({out}));
    for (const auto& t : {ln_w.back(), ln_b.back(), w.back(), b.back()}) wrt.push_back(t);
  }
  const torch::Tensor seed = torch::randn({N, G, out}, torch::kFloat64);
  const auto zero = [&] {
    for (auto& t : wrt) t.mutable_grad() = torch::Tensor();
  };
  std::vector<torch::Tensor> per_group;
  for (int64_t g = 0; g < G; ++g)
    per_group.push_back(
        torch::linear(torch::layer_norm(x.select(1, g), {in}, ln_w[size_t(g)], ln_b[size_t(g)], 1e-6), w[size_t(g)],
                      b[size_t(g)]));
  const auto want = output_and_grads(torch::stack(per_group, 1), wrt, seed);
  std::vector<std::vector<torch::Tensor>> runs;
  for (const Saving saving : {Saving::All, Saving::Lean}) {
    SCOPED_TRACE(saving == Saving::Lean ? "lean" : "all");
    zero();
    const Prelude norm = channel_norm_prelude(1e-6, torch::stack(ln_w), torch::stack(ln_b));
    runs.push_back(output_and_grads(grouped_linear(x, norm, w, b, saving), wrt, seed));
    ASSERT_EQ(runs.back().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(torch::allclose(runs.back()[i], want[i], 1e-12, 1e-12)) << "tensor " << i << " (0: the output)";
  }
  expect_bit_identical(runs[0], runs[1]);
  EXPECT_THROW(grouped_linear(x, {}, {w[0]}, {}, Saving::All), c10::Error);  // one weight for 4 groups
}

// Each prelude's rerun against its fn under autograd: the same h and the
// same gradients of x and of every param, bit for bit.
TEST(LeanOps, PreludeRerunsGiveAutogradsGradients) {
  torch::manual_seed(3);
  const auto leaf = [](std::vector<int64_t> s) { return torch::randn(s).requires_grad_(true); };
  const torch::Tensor w = leaf({16}), b = leaf({16});
  const torch::Tensor scale = leaf({3, 7, 16}), shift = leaf({3, 1, 16});  // shift broadcast over rows
  const std::vector<std::pair<const char*, Prelude>> cases = {
      {"layer norm", layer_norm_prelude(1e-5)},
      {"affine layer norm", layer_norm_prelude(1e-5, w, b)},
      {"modulated norm", modulated_norm_prelude(1e-6, scale, shift)},
      {"modulated norm, a shift per row (its gradient is dh itself)",
       modulated_norm_prelude(1e-6, scale, leaf({3, 7, 16}))},
      {"gelu, dropout 0 in training", gelu_dropout_prelude(0.0, true)},
      {"gelu, dropout 0.3 in evaluation", gelu_dropout_prelude(0.3, false)},
      {"gelu, dropout 0.3 in training (the generators as at the first run)", gelu_dropout_prelude(0.3, true)},
      {"per-channel affine norm", channel_norm_prelude(1e-6, leaf({7, 16}), leaf({7, 16}))},
  };
  for (const auto& [name, pre] : cases) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(bool(pre.rerun));
    const torch::Tensor x = leaf({3, 7, 16}), dh = torch::randn({3, 7, 16});
    torch::manual_seed(21);
    const torch::Tensor h = pre.fn(x);
    std::vector<torch::Tensor> wrt{x};
    wrt.insert(wrt.end(), pre.params.begin(), pre.params.end());
    const auto want = torch::autograd::grad({h}, wrt, {dh});
    torch::manual_seed(21);
    const PreludeRun run = pre.rerun(x.detach());
    EXPECT_TRUE(torch::equal(run.h, h.detach()));
    const std::vector<torch::Tensor> got = run.vjp(dh.clone());  // the vjp's own: it may write there
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << "gradient " << i;
  }
  {  // a plain layer norm's vjp writes dx into dh a block of rows at a time: more rows than a block
    SCOPED_TRACE("layer norm, 80000 rows");
    const Prelude pre = layer_norm_prelude(1e-5);
    const torch::Tensor x = leaf({2, 40000, 32}), dh = torch::randn({2, 40000, 32});
    const auto want = torch::autograd::grad({pre.fn(x)}, {x}, {dh});
    torch::Tensor mine = dh.clone();
    const void* where = mine.data_ptr();
    const std::vector<torch::Tensor> got = pre.rerun(x.detach()).vjp(std::move(mine));
    EXPECT_TRUE(torch::equal(got[0], want[0]));
    EXPECT_EQ(got[0].data_ptr(), where);  // no second tensor of dh's size
  }
  {  // a per-channel affine norm's vjp (the embed's read-out) takes the
     // factor's gradient in the norm's output and writes dx into dh
    SCOPED_TRACE("per-channel affine norm, 80000 rows");
    const torch::Tensor cw = leaf({7, 16}), cb = leaf({7, 16});
    const Prelude pre = channel_norm_prelude(1e-6, cw, cb);
    const torch::Tensor x = leaf({2, 40000, 7, 16}), dh = torch::randn({2, 40000, 7, 16});
    const auto want = torch::autograd::grad({pre.fn(x)}, {x, cw, cb}, {dh});
    torch::Tensor mine = dh.clone();
    const void* where = mine.data_ptr();
    const std::vector<torch::Tensor> got = pre.rerun(x.detach()).vjp(std::move(mine));
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << "gradient " << i;
    EXPECT_EQ(got[0].data_ptr(), where);
  }
  EXPECT_TRUE(gelu_dropout_prelude(0.3, true).draws_random);
  EXPECT_FALSE(gelu_dropout_prelude(0.3, false).draws_random);
}

// Under Saving::Rerun (a recomputation's second run) output_linear with a
// joint prelude runs neither its product nor its prelude in forward; the
// prelude runs once, jointly, in backward, with its random draws as at the
// first run, and the gradients are Saving::Lean's, bit for bit.
TEST(LeanOps, OutputLinearRunsAJointPreludeOnlyInBackwardInARerun) {
  Leaves l = leaves(torch::kFloat32);
  int fn_runs = 0, joint_runs = 0;
  Prelude pre;  // dropout(tanh(x)), its mask from the CPU generator
  pre.fn = [&](const torch::Tensor& t) {
    ++fn_runs;
    return torch::dropout(torch::tanh(t), 0.5, true);
  };
  pre.draws_random = true;
  pre.joint = [&](const torch::Tensor& t, const torch::Tensor& dh) {
    ++joint_runs;
    const torch::Tensor h = torch::tanh(t), keep = torch::dropout(torch::ones_like(t), 0.5, true);
    return Prelude::JointRun{h * keep, {dh * keep * (1 - h * h)}};
  };
  const torch::Tensor seed = torch::randn({3, 7, 8}), residual = torch::randn({3, 7, 8}).requires_grad_(true);
  const std::vector<torch::Tensor> wrt{l.x, l.w1, l.b1, residual};
  std::vector<std::vector<torch::Tensor>> grads;
  for (const Saving saving : {Saving::Lean, Saving::Rerun}) {
    SCOPED_TRACE(int(saving));
    for (const torch::Tensor& t : wrt) t.mutable_grad() = torch::Tensor();
    fn_runs = joint_runs = 0;
    torch::manual_seed(42);
    const torch::Tensor y = output_linear(l.x, pre, {l.w1}, {l.b1}, saving);
    EXPECT_EQ(fn_runs, saving == Saving::Lean ? 1 : 0);
    torch::manual_seed(7);  // backward must draw as the first run did, whatever the generator's state now
    std::vector<torch::Tensor> r = output_and_grads(y + residual, wrt, seed);
    EXPECT_EQ(joint_runs, 1);
    EXPECT_EQ(fn_runs, saving == Saving::Lean ? 1 : 0);
    if (saving == Saving::Rerun) EXPECT_TRUE(torch::equal(y.detach(), torch::zeros({3, 7, 8})));
    r.erase(r.begin());  // the outputs differ by design
    grads.push_back(r);
  }
  expect_bit_identical(grads[0], grads[1]);
  EXPECT_GT(grads[1][0].abs().sum().item<double>(), 0.0);  // gradients reached x
}

// A lean product lets go of its prelude after its backward (its closures
// hold tensors: cross-attention's keys and values): a second backward
// through it, with retain_graph, is refused with a clear error, not run
// with an empty prelude.
TEST(LeanOps, ALeanProductRefusesASecondBackward) {
  Leaves l = leaves(torch::kFloat32);
  const torch::Tensor y = fused_linear(l.x, affine_norm(l), {l.w1}, {l.b1}, Saving::Lean);
  y.sum().backward({}, /*retain_graph=*/true);
  EXPECT_GT(l.ln_w.grad().abs().sum().item<double>(), 0.0);
  try {
    y.sum().backward();
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a second time"), std::string::npos) << e.what();
  }
  // A product kept whole (Saving::All) holds no prelude: backward twice as LibTorch's.
  const torch::Tensor z = fused_linear(l.x, affine_norm(l), {l.w1}, {l.b1}, Saving::All);
  z.sum().backward({}, /*retain_graph=*/true);
  EXPECT_NO_THROW(z.sum().backward());
}

// CPU autocast in bfloat16 for one scope (it stands in for CUDA's, which
// the trainer uses with with_mixed_precision).
// (LibTorch 2.4 named the calls by device and deprecated the old ones.)
struct CpuAutocast {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  static void enable(bool on) { at::autocast::set_autocast_enabled(at::kCPU, on); }
  static void use_bf16() { at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16); }
#else
  static void enable(bool on) { at::autocast::set_cpu_enabled(on); }
  static void use_bf16() { at::autocast::set_autocast_cpu_dtype(at::kBFloat16); }
#endif
  CpuAutocast() {
    enable(true);
    use_bf16();
  }
  ~CpuAutocast() {
    enable(false);
    at::autocast::clear_cache();
  }
};

// Under autocast the product runs in bfloat16 and its gradient comes back
// in bfloat16, while x and the weights are float32: backward multiplies in
// the gradient's dtype and gives float32 gradients, as autograd does
// through autocast's casts (plain LibTorch ops, the reference here).
TEST(LeanOps, FusedLinearUnderAutocastGivesTheWeightsDtype) {
  torch::manual_seed(21);
  const torch::Tensor x = torch::randn({16, 8}).requires_grad_(true), w1 = torch::randn({6, 8}).requires_grad_(true),
                      w2 = torch::randn({4, 8}).requires_grad_(true), b1 = torch::randn({6}).requires_grad_(true),
                      b2 = torch::randn({4}).requires_grad_(true);
  std::vector<torch::Tensor> leaves{x, w1, w2, b1, b2};
  const auto grads_of = [&](const std::function<torch::Tensor()>& forward) {
    for (auto& t : leaves) t.mutable_grad() = torch::Tensor();
    torch::Tensor y;
    {
      const CpuAutocast on;
      y = forward();
    }
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    y.to(torch::kFloat).pow(2).sum().backward();
    std::vector<torch::Tensor> g;
    for (const auto& t : leaves) g.push_back(t.grad());
    return g;
  };
  const auto want = grads_of([&] {
    return torch::linear(torch::layer_norm(x, {8}), torch::cat({w1, w2}), torch::cat({b1, b2}));
  });
  for (const Saving s : {Saving::All, Saving::Lean}) {
    SCOPED_TRACE(s == Saving::All ? "all" : "lean");
    const auto got = grads_of([&] { return fused_linear(x, layer_norm_prelude(1e-5), {w1, w2}, {b1, b2}, s); });
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].defined()) << i;
      EXPECT_EQ(got[i].scalar_type(), torch::kFloat) << i;
      EXPECT_TRUE(torch::allclose(got[i], want[i], 2e-2, 5e-2)) << i;
    }
  }
}

}  // namespace
}  // namespace wg
