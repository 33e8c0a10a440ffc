// Saving::Lean in the attention and MLP layers (wg/model/attention.h,
// mlp.h; docs/recomputation.md): the q/k norm inside the attention kernel
// bit-identical to norming first; lean layers (AdaLayerNorm-conditioned
// ones, cores run again in backward, a recomputed core run once) giving
// Saving::All's output and gradients bit for bit, with and without
// dropout; q k v read in place where the fused weights lie one after
// another; cross-attention's keys gathered after the product; and what a
// lean layer keeps after its forward.
#include <gtest/gtest.h>
#include <torch/torch.h>

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

#include "bit_identical.h"

namespace wg {
namespace {

using testing::expect_bit_identical;
using testing::output_and_grads;

// The kernel norms q and k inside each tile (attention_kernel.cpp's
// TileQK), a sequence's keys once for all its row blocks: the output has
// the bits of norming q and k whole first (head_norm_forward) and running
// the kernel without the norm, for every layout, cells of 0 and 1 rows,
// and sequences cut into row blocks (400 rows: 640 KB of scores a head).
TEST(LeanLayers, QkNormInsideTheKernelIsBitIdentical) {
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
TEST(LeanLayers, AdaNormLayersAreBitIdenticalLeanAndAll) {
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
TEST(LeanLayers, CoresRunAgainAreBitIdenticalLeanAndAll) {
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
TEST(LeanLayers, FusedWeightsAreReadInPlaceWhereTheyLieOneAfterAnother) {
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

// A recomputed attention layer (PieceMode::Recompute: Saving::All in
// forward, Saving::Rerun in backward) whose core the CPU kernel runs as a
// joint pass: the rerun leaves the core out of its forward and runs it
// once in backward. With dropout and the q/k norm, on cells of 0 to 40
// rows, the gradients are those of a layer kept whole, bit for bit: dense and varlen
// self-attention, cross-attention, and keys gathered from a latent.
TEST(LeanLayers, RecomputedCoresRunOnceInBackwardBitIdentical) {
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

// The decoder's keys: rows of x_kv gathered after the norm and the
// product (kv_rows) give what gathering x_kv first gives, the gradient of
// each row summed over the segments that read it.
TEST(LeanLayers, CrossAttentionKeysGatheredAfterTheProductAreTheGatheredInputs) {
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

TEST(LeanLayers, KeepAboutHalf) {
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
