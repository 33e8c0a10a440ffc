// The CPU attention kernel (wg/model/attention_core.h) against the plain
// LibTorch reference (padded segments, autograd's backward): forward and
// backward over random segment lengths, empty and single-row segments,
// dense chunks and block-local attention; dropout's masks drawn again in
// backward (a finite-difference check); results independent of the thread
// count; the joint pass (forward and backward at once) bit for bit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <numeric>
#include <random>

#include "../common/thread_count.h"
#include "wg/model/attention_core.h"
#include "wg/util/blas.h"

namespace wg {
namespace {

struct Grads {
  torch::Tensor out, dq, dk, dv;
};

template <typename F>
Grads run(F&& attend, const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
          const torch::Tensor& d_out_seed) {
  torch::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
                v = v0.clone().requires_grad_(true);
  torch::Tensor out = attend(q, k, v);
  (out * d_out_seed).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

double worst(const torch::Tensor& a, const torch::Tensor& b) {
  return a.numel() == 0 ? 0.0 : (a - b).abs().max().item<double>() / std::max(1e-30, b.abs().max().item<double>());
}

void expect_close(const Grads& got, const Grads& want, double tol) {
  EXPECT_LE(worst(got.out, want.out), tol) << "output";
  EXPECT_LE(worst(got.dq, want.dq), tol) << "dq";
  EXPECT_LE(worst(got.dk, want.dk), tol) << "dk";
  EXPECT_LE(worst(got.dv, want.dv), tol) << "dv";
}

std::vector<int64_t> random_lengths(std::mt19937& rng, int n, int max_len) {
  std::uniform_int_distribution<int> len(0, max_len);
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(len(rng));
  out[0] = 0;  // always an empty segment
  out[1] = 1;  // and a single row
  return out;
}

int64_t total(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }

TEST(AttentionCore, VarlenEqualsThePaddedReference) {
  std::mt19937 rng(3);
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    for (const bool cross : {false, true}) {
      SCOPED_TRACE(std::string(dtype == torch::kFloat64 ? "float64" : "float32") + (cross ? " cross" : " self"));
      const std::vector<int64_t> lq = random_lengths(rng, 40, 17);
      const std::vector<int64_t> lk = cross ? random_lengths(rng, 40, 23) : lq;
      const VarlenSegments seg = VarlenSegments::from_lengths(lq, lk, torch::kCPU);
      EXPECT_FALSE(seg.padded());  // the kernel needs no padding
      torch::manual_seed(1);
      const auto opt = torch::TensorOptions().dtype(dtype);
      const torch::Tensor q = torch::randn({total(lq), 3, 8}, opt), k = torch::randn({total(lk), 3, 8}, opt),
                          v = torch::randn({total(lk), 3, 8}, opt), g = torch::randn({total(lq), 3, 8}, opt);
      const Grads got = run([&](auto& a, auto& b, auto& c) { return varlen_attention(a, b, c, seg, 0.0, true); }, q, k, v, g);
      const Grads want =
          run([&](auto& a, auto& b, auto& c) { return padded_varlen_attention(a, b, c, seg, 0.0, true); }, q, k, v, g);
      expect_close(got, want, dtype == torch::kFloat64 ? 1e-12 : 1e-5);
      // A segment without keys gives exactly 0 and no gradient.
      for (int64_t s = 0; s < seg.num_segments; ++s)
        if (lk[size_t(s)] == 0 && lq[size_t(s)] > 0) {
          EXPECT_EQ(got.out.narrow(0, seg.q_offsets[size_t(s)], lq[size_t(s)]).abs().max().item<double>(), 0.0);
          EXPECT_EQ(got.dq.narrow(0, seg.q_offsets[size_t(s)], lq[size_t(s)]).abs().max().item<double>(), 0.0);
        }
    }
  }
}

TEST(AttentionCore, DenseAndBlockLocalEqualTheReference) {
  torch::manual_seed(2);
  for (const int64_t batch : {1, 3, 37}) {  // one problem; several chunks
    SCOPED_TRACE(batch);
    const torch::Tensor q = torch::randn({batch, 13, 2, 4}), k = torch::randn({batch, 13, 2, 4}),
                        v = torch::randn({batch, 13, 2, 4}), g = torch::randn({batch, 13, 2, 4});
    const Grads got = run([](auto& a, auto& b, auto& c) { return dense_attention(a, b, c, 0.0, true); }, q, k, v, g);
    const Grads want = run([](auto& a, auto& b, auto& c) { return plain_dense_attention(a, b, c, 0.0, true); }, q, k, v, g);
    expect_close(got, want, 1e-5);
    // Block-local in blocks of 5 (5, 5 and a last block of 3) is varlen
    // attention over those blocks of the flattened rows.
    std::vector<int64_t> blocks;
    for (int64_t b = 0; b < batch; ++b) blocks.insert(blocks.end(), {5, 5, 3});
    const VarlenSegments seg = VarlenSegments::from_lengths(blocks, blocks, torch::kCPU);
    const auto rows = [](const torch::Tensor& t) { return t.reshape({-1, 2, 4}); };
    const Grads local = run([](auto& a, auto& b, auto& c) { return block_local_attention(a, b, c, 5); }, q, k, v, g);
    const Grads local_want = run(
        [&](auto& a, auto& b, auto& c) {
          return padded_varlen_attention(rows(a), rows(b), rows(c), seg, 0.0, true).view(a.sizes());
        },
        q, k, v, g);
    expect_close(local, local_want, 1e-5);
  }
}

TEST(AttentionCore, TheSameResultOnOneThreadAsOnTwo) {
  std::mt19937 rng(5);
  const std::vector<int64_t> lens = random_lengths(rng, 64, 12);
  const VarlenSegments seg = VarlenSegments::from_lengths(lens, lens, torch::kCPU);
  torch::manual_seed(4);
  const torch::Tensor q = torch::randn({total(lens), 2, 8}), k = torch::randn({total(lens), 2, 8}),
                      v = torch::randn({total(lens), 2, 8}), g = torch::randn({total(lens), 2, 8});
  for (const QkNorm norm : {QkNorm{}, QkNorm{1e-5}}) {  // with the q/k norm: normed in the tiles, on either thread
    SCOPED_TRACE(norm.eps);
    const std::vector<Grads> runs = testing::on_each_thread_count({1, 2}, [&] {
      torch::manual_seed(9);  // the same dropout seed
      return run([&](auto& a, auto& b, auto& c) { return varlen_attention(a, b, c, seg, 0.3, true, norm); }, q, k, v,
                 g);
    });
    EXPECT_TRUE(torch::equal(runs[0].out, runs[1].out));
    EXPECT_TRUE(torch::equal(runs[0].dq, runs[1].dq));
    EXPECT_TRUE(torch::equal(runs[0].dk, runs[1].dk));
    EXPECT_TRUE(torch::equal(runs[0].dv, runs[1].dv));
  }
}

TEST(AttentionCore, DropoutBackwardDrawsTheForwardsMasks) {
  // In float64, with the generator reseeded before every evaluation (the
  // same masks), the gradient equals central differences of the forward.
  const std::vector<int64_t> lens = {3, 0, 5, 1};
  const VarlenSegments seg = VarlenSegments::from_lengths(lens, lens, torch::kCPU);
  torch::manual_seed(6);
  const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor q = torch::randn({9, 2, 4}, opt), k = torch::randn({9, 2, 4}, opt),
                      v = torch::randn({9, 2, 4}, opt), g = torch::randn({9, 2, 4}, opt);
  const auto loss = [&](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
    torch::manual_seed(11);
    return (varlen_attention(a, b, c, seg, 0.4, true) * g).sum();
  };
  const Grads grads = run([&](auto& a, auto& b, auto& c) {
    torch::manual_seed(11);
    return varlen_attention(a, b, c, seg, 0.4, true);
  }, q, k, v, g);
  torch::manual_seed(11);
  const torch::Tensor no_dropout = varlen_attention(q, k, v, seg, 0.0, true);
  EXPECT_FALSE(torch::allclose(grads.out, no_dropout));  // some probabilities were dropped
  torch::NoGradGuard no_grad;
  const double h = 1e-6;
  for (int which = 0; which < 3; ++which)
    for (const int64_t flat : {0, 7, 20, 33, 50, 71}) {
      torch::Tensor plus[3] = {q.clone(), k.clone(), v.clone()}, minus[3] = {q.clone(), k.clone(), v.clone()};
      plus[which].view(-1)[flat] += h;
      minus[which].view(-1)[flat] -= h;
      const double numeric =
          (loss(plus[0], plus[1], plus[2]).item<double>() - loss(minus[0], minus[1], minus[2]).item<double>()) / (2 * h);
      const torch::Tensor& analytic = which == 0 ? grads.dq : which == 1 ? grads.dk : grads.dv;
      EXPECT_NEAR(analytic.view(-1)[flat].item<double>(), numeric, 1e-7) << "tensor " << which << " element " << flat;
    }
}

// The joint pass (a core run again in a lean backward): the forward's
// output and autograd's gradients, bit for bit, with dropout and the q/k
// norm, over dense chunks, varlen segments (an empty one, a single row,
// and one long enough to be worked through in row blocks) and cross-
// attention.
TEST(AttentionCore, JointPassIsTheForwardAndBackwardBitForBit) {
  torch::manual_seed(31);
  const int64_t H = 2, dh = 8, inner = H * dh;
  const std::vector<int64_t> lq = {0, 1, 5, 700, 9, 3}, lk = {2, 1, 5, 700, 9, 0};
  const VarlenSegments self_seg = VarlenSegments::from_lengths(lq, lq, torch::kCPU),
                       cross_seg = VarlenSegments::from_lengths(lq, lk, torch::kCPU);
  const QkNorm norm{1e-5};
  for (const double dropout : {0.0, 0.2}) {
    const auto check = [&](const char* name, const Projections& p, const std::function<torch::Tensor(const Projections&)>& forward,
                           const std::function<CoreJoint(const Projections&, const torch::Tensor&)>& joint) {
      SCOPED_TRACE(std::string(name) + ", dropout " + std::to_string(dropout));
      const torch::Tensor q = p.q.detach().clone().requires_grad_(true);
      const torch::Tensor kv = p.is_self() ? torch::Tensor() : p.kv.detach().clone().requires_grad_(true);
      const Projections leaf = p.is_self() ? Projections::self(q, H) : Projections::cross(q, kv, H);
      torch::manual_seed(77);
      const torch::Tensor out = forward(leaf);
      const torch::Tensor d_out = torch::randn_like(out);
      (out * d_out).sum().backward();
      torch::manual_seed(77);
      const CoreJoint j = joint(Projections{p.q.detach(), p.is_self() ? torch::Tensor() : p.kv.detach(), H}, d_out);
      EXPECT_TRUE(torch::equal(j.out, out.detach())) << "output";
      EXPECT_TRUE(torch::equal(j.d_q, q.grad())) << "d_q";
      if (!p.is_self()) EXPECT_TRUE(torch::equal(j.d_kv, kv.grad())) << "d_kv";
      EXPECT_GT(q.grad().abs().sum().item<double>(), 0.0);
    };
    check("dense", Projections::self(torch::randn({3, 40, 3 * inner}), H),
          [&](const Projections& p) { return dense_attention(p, dropout, true, norm); },
          [&](const Projections& p, const torch::Tensor& g) { return dense_attention_joint(p, dropout, norm, g); });
    check("varlen", Projections::self(torch::randn({total(lq), 3 * inner}), H),
          [&](const Projections& p) { return varlen_attention(p, self_seg, dropout, true, norm); },
          [&](const Projections& p, const torch::Tensor& g) {
            return varlen_attention_joint(p, self_seg, dropout, norm, g);
          });
    check("cross", Projections::cross(torch::randn({total(lq), inner}), torch::randn({total(lk), 2 * inner}), H),
          [&](const Projections& p) { return varlen_attention(p, cross_seg, dropout, true, norm); },
          [&](const Projections& p, const torch::Tensor& g) {
            return varlen_attention_joint(p, cross_seg, dropout, norm, g);
          });
  }
}

// Cross-attention whose keys and values are rows kv_rows of kv (the
// decoder's 9 cells'): its problems are cut at ranges of segments of about
// 2 MiB of gathered rows (here 1 KiB a row: about 2048 rows a range; one
// segment alone is longer than that), and the joint pass gathers, runs and
// sums range by range. Its output and gradients are autograd's through the
// gather, bit for bit, with dropout and the q/k norm, on 1 and 2 threads
// (on 2, the segment alone in its range must have its products on one
// thread, as in the forward among the others); without dropout both
// equal the keys gathered first; the reference reads them gathered.
TEST(AttentionCore, GatheredKeysJointPassRangeByRange) {
  torch::manual_seed(32);
  const int64_t H = 2, dh = 64, inner = H * dh, sources = 700;
  std::mt19937 gen(5);
  std::vector<int64_t> lq, lk;
  for (int s = 0; s < 800; ++s) {
    lq.push_back(std::vector<int64_t>{0, 1, 2, 3}[gen() % 4]);
    lk.push_back(std::vector<int64_t>{0, 3, 8, 9, 9}[gen() % 5]);
  }
  lq[300] = 4;
  lk[300] = 2500;  // a range of its own
  const VarlenSegments seg = VarlenSegments::from_lengths(lq, lk, torch::kCPU);
  ASSERT_GT(total(lk) * 2 * inner * 4, 3 * (int64_t(2) << 20));  // several ranges
  const torch::Tensor q0 = torch::randn({total(lq), inner}), kv0 = torch::randn({sources, 2 * inner}),
                      kv_rows = torch::randint(sources, {total(lk)}, torch::kInt64);
  const QkNorm norm{1e-5};
  for (const auto& [n, dropout] : std::vector<std::pair<int, double>>{{1, 0.0}, {1, 0.2}, {2, 0.0}, {2, 0.2}}) {
    // on 2 threads, the problem alone in its range must see BLAS as in the forward, among all
    const testing::ThreadCount scoped(n);
    SCOPED_TRACE(std::to_string(n) + " threads, dropout " + std::to_string(dropout));
    std::vector<std::vector<torch::Tensor>> runs;  // output, d_q, d_kv: gathered in the core, gathered first
    for (const bool first : {false, true}) {
      const torch::Tensor q = q0.clone().requires_grad_(true), kv = kv0.clone().requires_grad_(true);
      const Projections p = first ? Projections::cross(q, kv.index_select(0, kv_rows), H)
                                  : Projections::cross(q, kv, H, kv_rows);
      torch::manual_seed(77);
      const torch::Tensor out = varlen_attention(p, seg, dropout, true, norm);
      const torch::Tensor d_out = torch::ones_like(out) + out.detach();
      (out * d_out).sum().backward();
      runs.push_back({out.detach(), q.grad(), kv.grad()});
      if (first) continue;
      torch::manual_seed(77);
      const CoreJoint j = varlen_attention_joint(Projections::cross(q0, kv0, H, kv_rows), seg, dropout, norm, d_out);
      EXPECT_TRUE(torch::equal(j.out, out.detach())) << "output";
      EXPECT_TRUE(torch::equal(j.d_q, q.grad())) << "d_q";
      EXPECT_TRUE(torch::equal(j.d_kv, kv.grad())) << "d_kv";
      EXPECT_EQ(j.d_kv.sizes(), kv0.sizes());
      EXPECT_GT(kv.grad().abs().sum().item<double>(), 0.0);
    }
    if (dropout > 0) continue;
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(runs[0][i], runs[1][i], 1e-5, 1e-6)) << i;
  }
  {  // the joint pass gives the same bits on one thread as on two
    const torch::Tensor d_out = torch::randn({total(lq), H, dh});
    const std::vector<CoreJoint> runs = testing::on_each_thread_count({1, 2}, [&] {
      torch::manual_seed(78);
      return varlen_attention_joint(Projections::cross(q0, kv0, H, kv_rows), seg, 0.2, norm, d_out);
    });
    EXPECT_TRUE(torch::equal(runs[0].out, runs[1].out) && torch::equal(runs[0].d_q, runs[1].d_q) &&
                torch::equal(runs[0].d_kv, runs[1].d_kv));
  }
  {  // no segments: no output rows, kv's gradient 0
    const VarlenSegments none = VarlenSegments::from_lengths({}, {}, torch::kCPU);
    const CoreJoint j = varlen_attention_joint(Projections::cross(torch::zeros({0, inner}), kv0, H, kv_rows.slice(0, 0, 0)),
                                               none, 0.0, norm, torch::zeros({0, H, dh}));
    EXPECT_EQ(j.out.size(0), 0);
    EXPECT_TRUE(torch::equal(j.d_kv, torch::zeros_like(kv0)));
  }
  const auto [q, k, v] = Projections::cross(q0, kv0, H, kv_rows).split();  // as the reference (CUDA) reads them
  const torch::Tensor gathered = kv0.index_select(0, kv_rows);
  EXPECT_TRUE(torch::equal(k, gathered.slice(1, 0, inner).view({-1, H, dh})));
  EXPECT_TRUE(torch::equal(v, gathered.slice(1, inner).view({-1, H, dh})));
  EXPECT_THROW(varlen_attention(Projections::cross(q0, kv0, H, kv_rows.to(torch::kInt32)), seg, 0.0, false),
               c10::Error);
  EXPECT_THROW(varlen_attention(Projections::cross(q0, kv0, H, kv_rows.slice(0, 1)), seg, 0.0, false), c10::Error);
  EXPECT_THROW(varlen_attention(Projections::cross(q0, kv0.view({7, 100, 2 * inner}), H, kv_rows), seg, 0.0, false),
               c10::Error);  // kv as rows only
}

// Sequences whose scores do not fit one tile (over 512 KiB a head) are
// worked through in blocks of query rows, dK and dV summed over them: equal
// to the reference without dropout; with dropout, the gradient equals
// central differences of the forward (every block draws its part of the
// one mask, in forward and again in backward).
TEST(AttentionCore, LongSequencesInRowBlocks) {
  torch::manual_seed(13);
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const int64_t L = dtype == torch::kFloat64 ? 300 : 400;  // 720 KB, 640 KB of scores a head
    SCOPED_TRACE(L);
    const auto opt = torch::TensorOptions().dtype(dtype);
    const torch::Tensor q = torch::randn({2, L, 2, 4}, opt), k = torch::randn({2, L, 2, 4}, opt),
                        v = torch::randn({2, L, 2, 4}, opt), g = torch::randn({2, L, 2, 4}, opt);
    const Grads got = run([](auto& a, auto& b, auto& c) { return dense_attention(a, b, c, 0.0, true); }, q, k, v, g);
    const Grads want = run([](auto& a, auto& b, auto& c) { return plain_dense_attention(a, b, c, 0.0, true); }, q, k, v, g);
    expect_close(got, want, dtype == torch::kFloat64 ? 1e-12 : 1e-5);
    // with the q/k norm: each block norms its query rows, the first one
    // the keys, and k's gradient goes back through the norm after the last
    const auto norm = [](const torch::Tensor& t) { return torch::layer_norm(t, {t.size(-1)}, {}, {}, 1e-5); };
    const Grads normed =
        run([](auto& a, auto& b, auto& c) { return dense_attention(a, b, c, 0.0, true, QkNorm{1e-5}); }, q, k, v, g);
    const Grads normed_want = run(
        [&](auto& a, auto& b, auto& c) { return plain_dense_attention(norm(a), norm(b), c, 0.0, true); }, q, k, v, g);
    expect_close(normed, normed_want, dtype == torch::kFloat64 ? 1e-12 : 1e-5);
  }
  const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t L = 300;
  const torch::Tensor q = torch::randn({1, L, 1, 4}, opt), k = torch::randn({1, L, 1, 4}, opt),
                      v = torch::randn({1, L, 1, 4}, opt), g = torch::randn({1, L, 1, 4}, opt);
  const auto attend = [](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
    torch::manual_seed(17);
    return dense_attention(a, b, c, 0.3, true);
  };
  const Grads grads = run(attend, q, k, v, g);
  torch::NoGradGuard no_grad;
  const double h = 1e-6;
  // Elements of the first and of the last row block (rows 0 and 299), and keys every block reads.
  for (int which = 0; which < 3; ++which)
    for (const int64_t flat : {int64_t(1), int64_t(4 * 150 + 2), int64_t(4 * 299 + 3)}) {
      torch::Tensor plus[3] = {q.clone(), k.clone(), v.clone()}, minus[3] = {q.clone(), k.clone(), v.clone()};
      plus[which].view(-1)[flat] += h;
      minus[which].view(-1)[flat] -= h;
      const double numeric = ((attend(plus[0], plus[1], plus[2]) * g).sum().item<double>() -
                              (attend(minus[0], minus[1], minus[2]) * g).sum().item<double>()) /
                             (2 * h);
      const torch::Tensor& analytic = which == 0 ? grads.dq : which == 1 ? grads.dk : grads.dv;
      EXPECT_NEAR(analytic.view(-1)[flat].item<double>(), numeric, 1e-7) << "tensor " << which << " element " << flat;
    }
}

// q, k and v read where the fused projections leave them (Projections):
// self-attention's [.., 3·H·dh], cross-attention's q and [.., 2·H·dh] kv,
// with and without the q/k norm (taken inside the kernel's tiles); output and
// the projections' gradients equal the reference on split views, normed by
// LibTorch's layer norm.
TEST(AttentionCore, ProjectionsReadInPlaceEqualTheSplitReference) {
  torch::manual_seed(23);
  const int64_t H = 3, dh = 8, inner = H * dh;
  const std::vector<int64_t> lq = {4, 0, 7, 1, 3, 3}, lk = {5, 2, 0, 1, 6, 3};
  const VarlenSegments self_seg = VarlenSegments::from_lengths(lq, lq, torch::kCPU);
  const VarlenSegments cross_seg = VarlenSegments::from_lengths(lq, lk, torch::kCPU);
  const auto normed = [](const torch::Tensor& t, double eps) {
    return eps > 0 ? torch::layer_norm(t, {t.size(-1)}, {}, {}, eps) : t;
  };
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
    const auto o = torch::TensorOptions().dtype(dtype);
    const torch::Tensor packed = torch::randn({total(lq), 3 * inner}, o), q_rows = torch::randn({total(lq), inner}, o),
                        kv_rows = torch::randn({total(lk), 2 * inner}, o), dense = torch::randn({2, 11, 3 * inner}, o);
    for (const QkNorm norm : {QkNorm{}, QkNorm{1e-5}}) {
      SCOPED_TRACE(std::string(dtype == torch::kFloat64 ? "double" : "float") + " eps " + std::to_string(norm.eps));
      // fn(leaves) -> output, with the leaves' gradients from a fixed output gradient.
      const auto grads = [](const std::vector<torch::Tensor>& inputs, const auto& fn) {
        std::vector<torch::Tensor> leaves;
        for (const auto& t : inputs) leaves.push_back(t.clone().requires_grad_(true));
        const torch::Tensor out = fn(leaves);
        (out * torch::linspace(-1, 1, out.numel(), out.options()).view(out.sizes())).sum().backward();
        std::vector<torch::Tensor> result{out.detach()};
        for (const auto& l : leaves) result.push_back(l.grad());
        return result;
      };
      const auto heads = [&](const torch::Tensor& t) {
        std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end() - 1);
        shape.insert(shape.end(), {H, dh});
        return t.reshape(shape);
      };
      const auto thirds = [&](const torch::Tensor& t) { return t.split(inner, -1); };
      struct Pair {
        const char* name;
        std::vector<torch::Tensor> got, want;
      };
      const std::vector<Pair> pairs = {
          {"self varlen",
           grads({packed}, [&](auto& l) { return varlen_attention(Projections::self(l[0], H), self_seg, 0, true, norm); }),
           grads({packed},
                 [&](auto& l) {
                   const auto p = thirds(l[0]);
                   return padded_varlen_attention(normed(heads(p[0]), norm.eps), normed(heads(p[1]), norm.eps),
                                                  heads(p[2]), self_seg, 0, true);
                 })},
          {"cross varlen",
           grads({q_rows, kv_rows},
                 [&](auto& l) { return varlen_attention(Projections::cross(l[0], l[1], H), cross_seg, 0, true, norm); }),
           grads({q_rows, kv_rows},
                 [&](auto& l) {
                   const auto p = thirds(l[1]);
                   return padded_varlen_attention(normed(heads(l[0]), norm.eps), normed(heads(p[0]), norm.eps),
                                                  heads(p[1]), cross_seg, 0, true);
                 })},
          {"dense", grads({dense}, [&](auto& l) { return dense_attention(Projections::self(l[0], H), 0, true, norm); }),
           grads({dense},
                 [&](auto& l) {
                   const auto p = thirds(l[0]);
                   return plain_dense_attention(normed(heads(p[0]), norm.eps), normed(heads(p[1]), norm.eps),
                                                heads(p[2]), 0, true);
                 })},
          {"block-local",
           grads({dense}, [&](auto& l) { return block_local_attention(Projections::self(l[0], H), 4, norm); }),
           grads({dense},
                 [&](auto& l) {
                   const auto p = thirds(l[0]);
                   return block_local_reference(normed(heads(p[0]), norm.eps), normed(heads(p[1]), norm.eps),
                                                heads(p[2]), 4);
                 })},
      };
      for (const Pair& pair : pairs) {
        SCOPED_TRACE(pair.name);
        ASSERT_EQ(pair.got.size(), pair.want.size());
        for (size_t i = 0; i < pair.got.size(); ++i) EXPECT_LE(worst(pair.got[i], pair.want[i]), tol) << "tensor " << i;
      }
    }
  }
  // Widths that do not split into the heads: one error naming the width.
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { dense_attention(Projections::self(torch::randn({1, 4, 3 * inner + 1}), H), 0, true); })
                .find("qkv width 73 is not 3 x 3 heads"),
            std::string::npos);
  EXPECT_NE(message([&] {
              varlen_attention(Projections::cross(torch::randn({total(lq), inner}), torch::randn({total(lk), inner}), H),
                               cross_seg, 0, true);
            }).find("kv width 24 is not 2 x q's 24"),
            std::string::npos);
}

// The kernel's small products (wg/util/blas.h) against ATen's mm, every
// transposition, float and double, each operand a block inside a wider
// tensor (its leading dimension larger than its row), as a head's rows lie
// in packed [rows, heads, head width] tensors; C's neighbours untouched.
TEST(AttentionCore, GemmWithLeadingDimensionsEqualsMm) {
  ASSERT_TRUE(blas_available());
  torch::manual_seed(4);
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        SCOPED_TRACE(std::string(dtype == torch::kFloat64 ? "double" : "float") + (ta ? " Aᵀ" : " A") + (tb ? " Bᵀ" : " B"));
        const int64_t m = 5, n = 4, k = 7, pad = 3;
        const auto o = torch::TensorOptions().dtype(dtype);
        // Each operand: columns pad .. pad+cols of a wider tensor.
        const auto inside = [&](int64_t rows, int64_t cols) { return torch::randn({rows, cols + 2 * pad}, o); };
        const torch::Tensor a_all = ta ? inside(k, m) : inside(m, k), b_all = tb ? inside(n, k) : inside(k, n);
        torch::Tensor c_all = inside(m, n);
        const torch::Tensor a = a_all.narrow(1, pad, ta ? m : k), b = b_all.narrow(1, pad, tb ? k : n);
        const torch::Tensor c_before = c_all.clone();
        const torch::Tensor want = 0.5 * c_all.narrow(1, pad, n) + 2.0 * torch::mm(ta ? a.t() : a, tb ? b.t() : b);
        const int64_t lda = a_all.size(1), ldb = b_all.size(1), ldc = c_all.size(1);
        if (dtype == torch::kFloat64)
          gemm(ta, tb, m, n, k, 2.0, a.data_ptr<double>(), lda, b.data_ptr<double>(), ldb, 0.5,
               c_all.narrow(1, pad, n).data_ptr<double>(), ldc);
        else
          gemm(ta, tb, m, n, k, 2.0f, a.data_ptr<float>(), lda, b.data_ptr<float>(), ldb, 0.5f,
               c_all.narrow(1, pad, n).data_ptr<float>(), ldc);
        const torch::Tensor c = c_all.narrow(1, pad, n);
        EXPECT_TRUE(torch::allclose(c, want, 1e-5, 1e-5)) << (c - want).abs().max().item<double>();
        EXPECT_TRUE(torch::equal(c_all.narrow(1, 0, pad), c_before.narrow(1, 0, pad)));
        EXPECT_TRUE(torch::equal(c_all.narrow(1, pad + n, pad), c_before.narrow(1, pad + n, pad)));
      }
  }
}

}  // namespace
}  // namespace wg
