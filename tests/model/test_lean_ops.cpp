// Saving::Lean (wg/model/lean_ops.h, the q/k norm inside the attention
// kernel, the attention and MLP layers): bit-identical outputs and
// gradients to Saving::All, with and without dropout; fused_linear and
// grouped_linear equal to separate plain products; output_linear under
// Saving::Rerun (gradients without its product, and a recomputed attention
// core run once, in backward); and what a lean layer keeps after its forward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>

#include <functional>
#include <tuple>
#include <vector>

#include "wg/model/attention.h"
#include "wg/model/attention_core.h"
#include "wg/model/head_norm.h"
#include "wg/model/lean_ops.h"
#include "wg/model/mlp.h"
#include "wg/model/recompute.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

// The output and the gradients of every leaf after backward of sum(out · seed).
std::vector<torch::Tensor> output_and_grads(const torch::Tensor& out, const std::vector<torch::Tensor>& leaves,
                                            const torch::Tensor& seed) {
  (out * seed).sum().backward();
  std::vector<torch::Tensor> r{out.detach().clone()};
  for (const auto& l : leaves) r.push_back(l.grad().defined() ? l.grad().clone() : torch::Tensor());
  return r;
}

void expect_bit_identical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].defined(), b[i].defined()) << "tensor " << i;
    if (a[i].defined()) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i << " (0: the output)";
  }
}

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

// The kernel norms q and k inside each tile (attention_kernel.cpp's
// TileQK), a sequence's keys once for all its row blocks: the output has
// the bits of norming q and k whole first (head_norm_forward) and running
// the kernel without the norm, for every layout, cells of 0 and 1 rows,
// and sequences cut into row blocks (400 rows: 640 KB of scores a head).
TEST(LeanOps, QkNormInsideTheKernelIsBitIdentical) {
  torch::manual_seed(9);
  const VarlenSegments seg = VarlenSegments::from_lengths({3, 0, 5, 1, 5}, {4, 2, 5, 1, 5}, torch::kCPU);
  const torch::Tensor q = torch::randn({14, 2, 8}), k = torch::randn({17, 2, 8}), v = torch::randn({17, 2, 8});
  const torch::Tensor qd = torch::randn({2, 10, 2, 8}), kd = torch::randn({2, 10, 2, 8}),
                      vd = torch::randn({2, 10, 2, 8});
  const torch::Tensor ql = torch::randn({1, 400, 2, 8}), kl = torch::randn({1, 400, 2, 8}),
                      vl = torch::randn({1, 400, 2, 8});
  const double eps = 1e-5;
  // t [..., H, dh] normed per (row, head) as the kernel norms it
  const auto normed = [eps](const torch::Tensor& t) {
    const torch::Tensor x = t.contiguous(), y = torch::empty_like(x);
    const int64_t H = x.size(-2), dh = x.size(-1), rows = x.numel() / (H * dh);
    std::vector<float> rstd(size_t(rows * H));
    head_norm_forward(x.data_ptr<float>(), H * dh, rows, H, dh, eps, y.data_ptr<float>(), rstd.data());
    return y;
  };
  using Attend =
      std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const QkNorm&)>;
  const std::vector<std::tuple<const char*, Attend, std::vector<torch::Tensor>>> cases = {
      {"varlen",
       [&](auto& a, auto& b, auto& c, const QkNorm& n) { return varlen_attention(a, b, c, seg, 0.0, true, n); },
       {q, k, v}},
      {"dense",
       [&](auto& a, auto& b, auto& c, const QkNorm& n) { return dense_attention(a, b, c, 0.0, true, n); },
       {qd, kd, vd}},
      {"block-local",
       [&](auto& a, auto& b, auto& c, const QkNorm& n) { return block_local_attention(a, b, c, 4, n); },
       {qd, kd, vd}},
      {"dense, in row blocks",
       [&](auto& a, auto& b, auto& c, const QkNorm& n) { return dense_attention(a, b, c, 0.0, true, n); },
       {ql, kl, vl}},
  };
  for (const auto& [name, attend, in] : cases) {
    SCOPED_TRACE(name);
    const torch::Tensor inside = attend(in[0], in[1], in[2], QkNorm{eps});
    const torch::Tensor first = attend(normed(in[0]), normed(in[1]), in[2], QkNorm{});
    EXPECT_TRUE(torch::equal(inside, first));
  }
}

// AdaLayerNorm-conditioned layers (the decoder's): lean and all give the
// same output and gradients, aux's included, bit for bit.
TEST(LeanOps, AdaNormLayersAreBitIdenticalLeanAndAll) {
  torch::manual_seed(12);
  const int64_t d = 16, a = 5, rows = 24;
  MlpOptions mo;
  mo.dim_in = d;
  mo.dim_aux = a;
  Mlp mlp(mo);
  AttentionOptions ao;
  ao.dim = d;
  ao.num_heads = 2;
  ao.dim_aux = a;
  ao.qk_norm = true;
  SelfAttention attn(ao);
  const VarlenSegments cells = VarlenSegments::from_lengths({5, 8, 0, 11}, {5, 8, 0, 11}, torch::kCPU);
  const torch::Tensor x = torch::randn({rows, d}).requires_grad_(true), aux = torch::randn({rows, a}).requires_grad_(true);
  const torch::Tensor seed = torch::randn({rows, d});
  std::vector<torch::Tensor> wrt{x, aux};
  for (const auto& p : mlp->parameters()) wrt.push_back(p);
  for (const auto& p : attn->parameters()) wrt.push_back(p);
  std::vector<std::vector<torch::Tensor>> runs;
  for (const Saving s : {Saving::All, Saving::Lean}) {
    for (auto& t : wrt) t.mutable_grad() = torch::Tensor();
    const torch::Tensor y = mlp->forward(attn->forward_varlen(x, cells, aux, s), aux, s);
    runs.push_back(output_and_grads(y, wrt, seed));
  }
  expect_bit_identical(runs[0], runs[1]);
  EXPECT_GT(runs[0][2].abs().sum().item<double>(), 0.0);  // gradients reached aux
}

// A self- and a cross-attention layer of width d, 4 heads (the cross
// one's keys and values dim_kv wide), and both's parameters.
struct AttentionPair {
  SelfAttention self_attn{nullptr};
  CrossAttention cross_attn{nullptr};
  AttentionPair(int64_t d, int64_t dim_kv, double dropout) {
    AttentionOptions ao;
    ao.dim = d;
    ao.num_heads = 4;
    ao.dropout = dropout;
    self_attn = SelfAttention(ao);
    ao.dim_kv = dim_kv;
    cross_attn = CrossAttention(ao);
  }
  std::vector<torch::Tensor> params() const {
    std::vector<torch::Tensor> p = self_attn->parameters(), c = cross_attn->parameters();
    p.insert(p.end(), c.begin(), c.end());
    return p;
  }
};

// Layers whose core runs again in a lean backward (few keys a query:
// lean_reruns_core), as the joint
// pass on the CPU kernel: dense and varlen self-attention and cross-
// attention, with dropout and the q/k norm, give all's output and
// gradients bit for bit.
TEST(LeanOps, CoresRunAgainAreBitIdenticalLeanAndAll) {
  torch::manual_seed(14);
  const int64_t d = 64, rows = 4096;
  AttentionPair layers(d, 32, 0.1);
  SelfAttention self_attn = layers.self_attn;
  CrossAttention cross_attn = layers.cross_attn;
  const VarlenSegments cells = VarlenSegments::from_lengths(std::vector<int64_t>(rows / 8, 8),
                                                            std::vector<int64_t>(rows / 8, 8), torch::kCPU);
  const VarlenSegments neighbours = VarlenSegments::from_lengths(std::vector<int64_t>(rows / 8, 8),
                                                                 std::vector<int64_t>(rows / 8, 5), torch::kCPU);
  const torch::Tensor x = torch::randn({rows, d}).requires_grad_(true), xd = torch::randn({rows / 8, 8, d}).requires_grad_(true),
                      kv = torch::randn({rows / 8 * 5, 32}).requires_grad_(true),
                      tokens = torch::randn({300, 32}).requires_grad_(true),
                      kv_rows = torch::randint(300, {rows / 8 * 16}, torch::kInt64);  // rows read 0 to ~60 times
  // 16 gathered keys a segment: 4 MiB of gathered keys and values, two
  // ranges of the joint pass (attention_core.h), the core still run again.
  const VarlenSegments gathered = VarlenSegments::from_lengths(std::vector<int64_t>(rows / 8, 8),
                                                               std::vector<int64_t>(rows / 8, 16), torch::kCPU);
  using Forward = std::function<torch::Tensor(Saving)>;
  const std::vector<std::pair<const char*, Forward>> cases = {
      {"dense", [&](Saving s) { return self_attn->forward(xd, {}, s); }},
      {"varlen", [&](Saving s) { return self_attn->forward_varlen(x, cells, {}, s); }},
      {"cross", [&](Saving s) { return cross_attn->forward(x, kv, neighbours, {}, s); }},
      {"cross, keys gathered", [&](Saving s) { return cross_attn->forward(x, tokens, gathered, {}, s, kv_rows); }},
  };
  for (const auto& [name, forward] : cases) {
    SCOPED_TRACE(name);
    std::vector<torch::Tensor> wrt{x, xd, kv, tokens};
    for (const auto& p : layers.params()) wrt.push_back(p);
    std::vector<std::vector<torch::Tensor>> runs;
    for (const Saving s : {Saving::All, Saving::Lean}) {
      for (auto& t : wrt) t.mutable_grad() = torch::Tensor();
      torch::manual_seed(3);
      const torch::Tensor y = forward(s);
      runs.push_back(output_and_grads(y, wrt, torch::ones_like(y) + y.detach()));
    }
    expect_bit_identical(runs[0], runs[1]);
  }
}

// q, k and v (and cross-attention's k and v) lie one after another in one
// storage from construction, so their fused product reads them in place;
// when they do not (each given its own storage, as a move to another
// device does), the product concatenates them: the output and gradients
// are the same bits either way, in place they see an in-place update (an
// optimizer's), and place_fused puts them back.
TEST(LeanOps, FusedWeightsAreReadInPlaceWhereTheyLieOneAfterAnother) {
  torch::manual_seed(21);
  AttentionPair layers(32, 16, 0.0);
  const auto fused = [&] {
    std::vector<std::vector<torch::Tensor>> groups;
    for (const char* name : {"proj_heads_q.weight", "proj_heads_k.weight", "proj_heads_v.weight"})
      (groups.empty() ? groups.emplace_back() : groups[0]).push_back(layers.self_attn->named_parameters()[name]);
    groups.push_back({layers.cross_attn->named_parameters()["proj_heads_k.weight"],
                      layers.cross_attn->named_parameters()["proj_heads_v.weight"]});
    return groups;
  };
  for (const auto& g : fused()) EXPECT_TRUE(lie_adjacent(g));
  const VarlenSegments cells = VarlenSegments::from_lengths({5, 0, 9}, {5, 0, 9}, torch::kCPU),
                       seg = VarlenSegments::from_lengths({5, 0, 9}, {4, 3, 6}, torch::kCPU);
  const torch::Tensor x = torch::randn({14, 32}).requires_grad_(true), kv = torch::randn({13, 16}).requires_grad_(true);
  std::vector<torch::Tensor> wrt{x, kv};
  for (const auto& p : layers.params()) wrt.push_back(p);
  const auto run = [&] {
    for (auto& t : wrt) t.mutable_grad() = torch::Tensor();
    const torch::Tensor y = layers.self_attn->forward_varlen(x, cells, {}, Saving::All) +
                            layers.cross_attn->forward(x, kv, seg, {}, Saving::Lean);
    return output_and_grads(y, wrt, torch::ones_like(y) + y.detach());
  };
  const std::vector<torch::Tensor> in_place = run();
  for (const auto& g : fused())
    for (const torch::Tensor& w : g) w.set_data(w.detach().clone());
  for (const auto& g : fused()) EXPECT_FALSE(lie_adjacent(g));
  expect_bit_identical(in_place, run());  // concatenated
  layers.self_attn->place_fused();
  layers.cross_attn->place_fused();
  for (const auto& g : fused()) EXPECT_TRUE(lie_adjacent(g));
  const std::vector<torch::Tensor> qkv = fused()[0];
  EXPECT_FALSE(lie_adjacent({qkv[1], qkv[0], qkv[2]}));          // one storage, another order
  EXPECT_FALSE(lie_adjacent({qkv[0], qkv[2]}));                  // a gap
  EXPECT_FALSE(lie_adjacent({qkv[0].narrow(0, 0, 0), qkv[0]}));  // no rows
  expect_bit_identical(in_place, run());
  {
    const torch::NoGradGuard no_grad;
    for (const auto& g : fused()) g.back().add_(0.5);  // as an optimizer updates a parameter
  }
  const std::vector<torch::Tensor> updated = run();
  EXPECT_FALSE(torch::equal(updated[0], in_place[0]));
  for (const auto& g : fused())
    for (const torch::Tensor& w : g) w.set_data(w.detach().clone());
  expect_bit_identical(updated, run());
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

// A recomputed attention layer (PieceMode::Recompute: Saving::All in
// forward, Saving::Rerun in backward) whose core the CPU kernel runs as a
// joint pass: the rerun leaves the core out of its forward and runs it
// once in backward. With dropout and the q/k norm, on cells of 0 to 40
// rows, the gradients are those of a layer kept whole, bit for bit: dense and varlen
// self-attention, cross-attention, and keys gathered from a latent.
TEST(LeanOps, RecomputedCoresRunOnceInBackwardBitIdentical) {
  torch::manual_seed(16);
  const int64_t d = 32, rows = 96;
  AttentionPair layers(d, 24, 0.2);
  SelfAttention self_attn = layers.self_attn;
  CrossAttention cross_attn = layers.cross_attn;
  const std::vector<int64_t> lens = {5, 0, 17, 1, 33, 40};  // 96 rows, one cell empty, one of a single token
  const VarlenSegments cells = VarlenSegments::from_lengths(lens, lens, torch::kCPU);
  const VarlenSegments neighbours = VarlenSegments::from_lengths(lens, {3, 4, 0, 2, 7, 1}, torch::kCPU);
  const VarlenSegments gathered = VarlenSegments::from_lengths(lens, {9, 9, 9, 9, 9, 9}, torch::kCPU);
  const torch::Tensor x = torch::randn({rows, d}).requires_grad_(true),
                      xd = torch::randn({6, 16, d}).requires_grad_(true),
                      kv = torch::randn({17, 24}).requires_grad_(true),
                      tokens = torch::randn({11, 24}).requires_grad_(true),
                      kv_rows = torch::randint(11, {54}, torch::kInt64);
  using Layer = std::function<torch::Tensor(const torch::Tensor&, Saving)>;  // from its query input
  const std::vector<std::tuple<const char*, torch::Tensor, Layer>> cases = {
      {"dense", xd, [&](const torch::Tensor& t, Saving s) { return self_attn->forward(t, {}, s); }},
      {"varlen", x, [&](const torch::Tensor& t, Saving s) { return self_attn->forward_varlen(t, cells, {}, s); }},
      {"cross", x, [&](const torch::Tensor& t, Saving s) { return cross_attn->forward(t, kv, neighbours, {}, s); }},
      {"cross, keys gathered", x,
       [&](const torch::Tensor& t, Saving s) { return cross_attn->forward(t, tokens, gathered, {}, s, kv_rows); }},
  };
  for (const auto& [name, input, layer] : cases) {
    SCOPED_TRACE(name);
    std::vector<torch::Tensor> params{kv, tokens};
    for (const auto& p : layers.params()) params.push_back(p);
    std::vector<torch::Tensor> wrt{input};
    wrt.insert(wrt.end(), params.begin(), params.end());
    std::vector<std::vector<torch::Tensor>> runs;
    for (const bool recompute : {false, true}) {
      for (auto& t : wrt) t.mutable_grad() = torch::Tensor();
      torch::manual_seed(3);
      const Layer& f = layer;
      const torch::Tensor y =
          recompute ? recomputed([&](const torch::Tensor& t) { return f(t, Saving::All); }, input, params,
                                 [&](const torch::Tensor& t) { return f(t, Saving::Rerun); })
                    : f(input, Saving::All);
      runs.push_back(output_and_grads(y, wrt, torch::ones_like(y) + y.detach()));
    }
    expect_bit_identical(runs[0], runs[1]);
    EXPECT_GT(runs[1][1].abs().sum().item<double>(), 0.0);  // the input got gradients
  }
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

// The decoder's keys: rows of x_kv gathered after the norm and the
// product (kv_rows) give what gathering x_kv first gives, the gradient of
// each row summed over the segments that read it.
TEST(LeanOps, CrossAttentionKeysGatheredAfterTheProductAreTheGatheredInputs) {
  torch::manual_seed(15);
  const int64_t d = 16, dkv = 24;
  AttentionOptions ao;
  ao.dim = d;
  ao.dim_kv = dkv;
  ao.num_heads = 2;
  CrossAttention cross(ao);
  const VarlenSegments seg = VarlenSegments::from_lengths({3, 0, 5, 2}, {9, 9, 0, 9}, torch::kCPU);
  const torch::Tensor x = torch::randn({10, d}).requires_grad_(true), tokens = torch::randn({7, dkv}).requires_grad_(true);
  const torch::Tensor kv_rows = torch::randint(7, {27}, torch::kInt64), seed = torch::randn({10, d});
  for (const Saving s : {Saving::All, Saving::Lean}) {
    std::vector<torch::Tensor> wrt{x, tokens};
    for (const auto& p : cross->parameters()) wrt.push_back(p);
    std::vector<std::vector<torch::Tensor>> runs;
    for (const bool after : {false, true}) {
      for (auto& t : wrt) t.mutable_grad() = torch::Tensor();
      const torch::Tensor y = after ? cross->forward(x, tokens, seg, {}, s, kv_rows)
                                    : cross->forward(x, tokens.index_select(0, kv_rows), seg, {}, s);
      runs.push_back(output_and_grads(y, wrt, seed));
    }
    for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_TRUE(torch::allclose(runs[0][i], runs[1][i], 1e-5, 1e-6)) << i;
    EXPECT_GT(runs[1][2].abs().sum().item<double>(), 0.0);  // the tokens got gradients
  }
  EXPECT_THROW(cross->forward(x, tokens, seg, {}, Saving::All, kv_rows.to(torch::kInt32)), c10::Error);
}

// Bytes a layer's forward leaves allocated (its output and what backward needs).
int64_t kept_by_forward(const std::function<torch::Tensor()>& forward) {
  const int64_t before = memory_snapshot("cpu").current_bytes;
  const torch::Tensor out = forward();
  return memory_snapshot("cpu").current_bytes - before;
}

TEST(LeanOps, LeanLayersKeepAboutHalf) {
  install_counting_allocator();
  torch::manual_seed(1);
  const int64_t d = 64, rows = 4096;
  MlpOptions mo;
  mo.dim_in = d;
  mo.hidden_factor = 4;
  Mlp mlp(mo);
  AttentionOptions ao;
  ao.dim = d;
  ao.num_heads = 4;
  SelfAttention attn(ao);
  const VarlenSegments cells = VarlenSegments::from_lengths(std::vector<int64_t>(rows / 8, 8),
                                                            std::vector<int64_t>(rows / 8, 8), torch::kCPU);
  const torch::Tensor x = torch::randn({rows, d}).requires_grad_(true);
  const int64_t unit = rows * d * 4;  // one [rows, d] float tensor
  for (const Saving s : {Saving::All, Saving::Lean}) {
    // MLP (f = 4): all keeps norm(x), the hidden pre- and post-activation and the output: 10 units; lean 5.
    // Attention: the norm, q k v, the core's output and the output: 6 units (and the log-sum-exp;
    // the kernel norms q and k again in backward); lean 4 (x, q k v, the output: the core runs
    // again in backward).
    const int64_t m = kept_by_forward([&] { return mlp->forward(x, {}, s); });
    const int64_t a = kept_by_forward([&] { return attn->forward_varlen(x, cells, {}, s); });
    const double mu = double(m) / unit, au = double(a) / unit;
    std::cout << (s == Saving::Lean ? "lean" : "all ") << ": mlp " << mu << " attention " << au << " units\n";
    if (s == Saving::All) {
      EXPECT_GE(mu, 10.0);
      EXPECT_GE(au, 6.0);
    } else {
      EXPECT_LT(mu, 5.1);
      EXPECT_LT(au, 4.1);
    }
  }
  // 64 keys a query, more than d/2: the core costs as much as the
  // projections (lean_reruns_core, saving.h), so lean keeps its output: 5 units.
  const VarlenSegments long_cells = VarlenSegments::from_lengths(std::vector<int64_t>(rows / 64, 64),
                                                                 std::vector<int64_t>(rows / 64, 64), torch::kCPU);
  const double kept = double(kept_by_forward([&] { return attn->forward_varlen(x, long_cells, {}, Saving::Lean); })) / unit;
  std::cout << "lean, 64 keys a query: attention " << kept << " units\n";
  EXPECT_GT(kept, 4.9);
  EXPECT_LT(kept, 5.2);
  // 8 keys a query on 512 rows: the rule asks only how cheap the core is,
  // so a small layer runs it again too (until 2026-12-05 one with an output
  // under 2^18 elements kept it): 4 units.
  const VarlenSegments few = VarlenSegments::from_lengths(std::vector<int64_t>(64, 8), std::vector<int64_t>(64, 8),
                                                          torch::kCPU);
  const torch::Tensor x_few = x.slice(0, 0, 512);
  const double small =
      double(kept_by_forward([&] { return attn->forward_varlen(x_few, few, {}, Saving::Lean); })) / (unit / 8);
  std::cout << "lean, 512 rows: attention " << small << " units\n";
  EXPECT_GT(small, 3.9);
  EXPECT_LT(small, 4.2);
}

}  // namespace
}  // namespace wg
