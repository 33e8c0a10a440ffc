// The CPU attention kernel's work on one problem, tile by tile: the
// score tiles, the q/k norm inside them (TileQK), the dropout mask of a
// tile (TileMask), a tile's forward and backward, and run_problem, which
// runs a problem's forward, backward or joint pass. The kernel's calls
// (how problems run over the threads, autograd, the joint pass) are in
// attention_kernel.cpp, which lists the invariants both keep; private to
// it (no other file includes this header).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "attention_kernel.h"
#include "recorded_bmm.h"
#include "wg/model/dropout.h"
#include "wg/model/head_norm.h"
#include "wg/model/lane_sum.h"
#include "wg/model/small_gemm.h"
#include "wg/model/softmax_rows.h"
#include "wg/util/blas.h"

namespace wg::kernel {

// Head h of row r of packed rows: the [rows, dh] matrix of one sequence
// and head starts at at(first row, h), its rows ld apart (q, k and v may
// be column blocks of one fused projection's rows).
template <typename T>
struct Rows {
  T* data;
  int64_t ld, dh;
  T* at(int64_t row, int64_t h) const { return data + row * ld + h * dh; }
};
template <typename T>
Rows<T> rows_view(const torch::Tensor& t) {  // t [R, H, dh] contiguous
  return {t.data_ptr<T>(), t.size(1) * t.size(2), t.size(2)};
}

// Whether a problem's float products go to small_gemm: by its shape alone
// (small_gemm_takes, wg/model/small_gemm.h, says why), so a forward, a
// backward and a joint pass take the same path and, on the same threads,
// give the same bits.
inline bool small_products(const Problem& pr, int64_t dh) { return small_gemm_takes(pr.lq, pr.lk, dh); }

// c = alpha · op(a) · op(b) + beta · c, row-major with leading dimensions:
// by small_gemm where `small` and the CPU has AVX-512 or AVX2, else
// through BLAS (wg/util/blas.h: the BLAS's own up to small_sgemm_limit()
// multiply-adds, oneDNN above; the kernel runs only where the process has
// a BLAS).
template <typename T>
void mm(bool small, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
        const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (small && small_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Runs product(i) for items [first, last) of a problem, seen by LibTorch's
// profiler as the one bmm they make together (recorded_bmm.h).
template <typename F>
void products(int64_t first, int64_t last, int64_t m, int64_t n, int64_t k, const F& product) {
  recorded_as_bmm(last - first, m, k, n, [&] {
    for (int64_t i = first; i < last; ++i) product(i);
  });
}

// A problem is worked through in tiles whose score matrices stay in the
// core's cache: items [i0, i1) (item = sequence · H + head), query rows
// [r0, r1) of each. Short sequences: several whole items per tile; long
// ones: one item, a block of its rows. A tile's scores are then the
// contiguous elements (i0 · lq + r0) · lk ... of the problem's
// [items, lq, lk] score tensor (dropout's mask offsets).
constexpr int64_t kTileBytes = int64_t(512) << 10;  // one score tile; backward holds three and its mask bytes

struct Tile {
  int64_t i0, i1, r0, r1;
  int64_t rows() const { return r1 - r0; }
  int64_t items() const { return i1 - i0; }
};

template <typename F>
void for_each_tile(int64_t items, int64_t lq, int64_t lk, int64_t element_size, const F& fn) {
  const int64_t row_bytes = lk * element_size, item_bytes = lq * row_bytes;
  if (item_bytes <= kTileBytes) {
    const int64_t per_tile = std::max<int64_t>(1, kTileBytes / item_bytes);
    for (int64_t i0 = 0; i0 < items; i0 += per_tile) fn(Tile{i0, std::min(items, i0 + per_tile), 0, lq});
    return;
  }
  const int64_t rows = std::max<int64_t>(1, kTileBytes / row_bytes);
  for (int64_t i = 0; i < items; ++i)
    for (int64_t r0 = 0; r0 < lq; r0 += rows) fn(Tile{i, i + 1, r0, std::min(lq, r0 + rows)});
}

// Per-row values of a tile between the [R, H] layout of the whole call and
// the tile's [items, rows] order.
template <typename T>
void rows_to_tile(const Problem& pr, const Tile& t, int64_t H, const T* from, T* to) {
  for (int64_t i = t.i0; i < t.i1; ++i)
    for (int64_t j = t.r0; j < t.r1; ++j) *to++ = from[(pr.q_first[size_t(i / H)] + j) * H + i % H];
}
template <typename T>
void tile_to_rows(const Problem& pr, const Tile& t, int64_t H, const T* from, T* to) {
  for (int64_t i = t.i0; i < t.i1; ++i)
    for (int64_t j = t.r0; j < t.r1; ++j) to[(pr.q_first[size_t(i / H)] + j) * H + i % H] = *from++;
}

// The operands of one call as rows: q and k as the projections gave them,
// v, the output and its rows' log-sum-exp ([R, H]); in backward also the
// output's gradient and q's, k's and v's (written in place). norm_eps > 0:
// q and k are normed per head inside each tile (TileQK).
template <typename T>
struct Operands {
  Rows<T> Q, K, V, O, dO, dQ, dK, dV;
  T* lse;
  int64_t H;
  T scale;
  double dropout;
  double norm_eps;
  torch::TensorOptions options;
};

// Item i's query rows from row r on, and its key rows, in rows `at`.
template <typename T>
T* query_rows(const Problem& pr, const Rows<T>& at, int64_t H, int64_t i, int64_t r) {
  return at.at(pr.q_first[size_t(i / H)] + r, i % H);
}
template <typename T>
T* key_rows(const Problem& pr, const Rows<T>& at, int64_t H, int64_t i) {
  return at.at(pr.k_first[size_t(i / H)], i % H);
}

// q and k as a tile's products read them: in their slots, or, with the
// q/k norm, normed into the tile's own buffers ([items, rows, dh] of q,
// [items, lk, dh] of k, each row's rstd beside them), which stay in the
// core's cache and are dropped with the tile: nothing normed is kept
// between forward and backward, and backward norms again. Each (row, head)
// is normed alone (head_norm.h), so the values are those of norming the
// whole call at once. The keys of an item cut into row blocks are normed
// at its first block and kept for the next ones (Scratch). In backward the
// tile's products write the normed rows' gradients into dqn and dkn, and
// q's and k's gradients go back through the norm from there into their
// slots: q's once the tile's dQ is made, k's once an item's last row block
// has added its part (key_grads_done).
template <typename T>
struct TileQK {
  struct Scratch {  // k's buffers, kept across an item's row blocks
    std::vector<T> kn, k_rstd, dkn;
  };
  const Problem& pr;
  const Tile& t;
  const Operands<T>& a;
  Scratch& keys;
  std::vector<T> qn, q_rstd, dqn;

  TileQK(const Problem& pr_, const Tile& t_, const Operands<T>& a_, Scratch& keys_)
      : pr(pr_), t(t_), a(a_), keys(keys_) {
    if (!normed()) return;
    const int64_t dh = a.Q.dh, m = t.rows(), lk = pr.lk;
    qn.resize(size_t(t.items() * m * dh));
    q_rstd.resize(size_t(t.items() * m));
    for (int64_t i = t.i0; i < t.i1; ++i)
      head_norm_forward(query_rows(pr, a.Q, a.H, i, t.r0), a.Q.ld, m, int64_t(1), dh, a.norm_eps,
                        qn.data() + (i - t.i0) * m * dh, q_rstd.data() + (i - t.i0) * m);
    if (t.r0 > 0) return;  // the item's keys are normed already
    keys.kn.resize(size_t(t.items() * lk * dh));
    keys.k_rstd.resize(size_t(t.items() * lk));
    for (int64_t i = t.i0; i < t.i1; ++i)
      head_norm_forward(key_rows(pr, a.K, a.H, i), a.K.ld, lk, int64_t(1), dh, a.norm_eps,
                        keys.kn.data() + (i - t.i0) * lk * dh, keys.k_rstd.data() + (i - t.i0) * lk);
  }
  bool normed() const { return a.norm_eps > 0; }
  // Item i's query rows of the tile and its key rows, with their row stride.
  const T* q(int64_t i) const {
    return normed() ? qn.data() + (i - t.i0) * t.rows() * a.Q.dh : query_rows(pr, a.Q, a.H, i, t.r0);
  }
  int64_t q_ld() const { return normed() ? a.Q.dh : a.Q.ld; }
  const T* k(int64_t i) const {
    return normed() ? keys.kn.data() + (i - t.i0) * pr.lk * a.K.dh : key_rows(pr, a.K, a.H, i);
  }
  int64_t k_ld() const { return normed() ? a.K.dh : a.K.ld; }
  // Where the products write the gradients of item i's (normed) q and k.
  T* dq(int64_t i) {
    if (!normed()) return query_rows(pr, a.dQ, a.H, i, t.r0);
    if (dqn.empty()) dqn.resize(qn.size());
    return dqn.data() + (i - t.i0) * t.rows() * a.Q.dh;
  }
  int64_t dq_ld() const { return normed() ? a.Q.dh : a.dQ.ld; }
  T* dk(int64_t i) {
    if (!normed()) return key_rows(pr, a.dK, a.H, i);
    if (keys.dkn.size() != keys.kn.size()) keys.dkn.resize(keys.kn.size());
    return keys.dkn.data() + (i - t.i0) * pr.lk * a.K.dh;
  }
  int64_t dk_ld() const { return normed() ? a.K.dh : a.dK.ld; }
  // Back through the norm into q's slot (the tile's rows), and, after an
  // item's last row block, into k's.
  void q_grads_done() {
    if (!normed()) return;
    const int64_t dh = a.Q.dh, m = t.rows();
    for (int64_t i = t.i0; i < t.i1; ++i)
      head_norm_backward(dqn.data() + (i - t.i0) * m * dh, dh, qn.data() + (i - t.i0) * m * dh,
                         q_rstd.data() + (i - t.i0) * m, m, int64_t(1), dh, query_rows(pr, a.dQ, a.H, i, t.r0),
                         a.dQ.ld);
  }
  void key_grads_done() {
    if (!normed() || t.r1 < pr.lq) return;
    const int64_t dh = a.K.dh, lk = pr.lk;
    for (int64_t i = t.i0; i < t.i1; ++i)
      head_norm_backward(keys.dkn.data() + (i - t.i0) * lk * dh, dh, keys.kn.data() + (i - t.i0) * lk * dh,
                         keys.k_rstd.data() + (i - t.i0) * lk, lk, int64_t(1), dh, key_rows(pr, a.dK, a.H, i), a.dK.ld);
  }
};

// A tile's scores q kᵀ · scale: [items, rows, lk].
template <typename T>
torch::Tensor tile_scores(const Problem& pr, const Tile& t, const Operands<T>& a, const TileQK<T>& qk) {
  const int64_t m = t.rows(), lk = pr.lk, size = m * lk;
  const bool small = small_products(pr, a.Q.dh);
  torch::Tensor S = torch::empty({t.items(), m, lk}, a.options);
  T* s = S.data_ptr<T>();  // s + (i - i0) · size: item i's scores
  products(t.i0, t.i1, m, lk, a.Q.dh, [&](int64_t i) {
    mm<T>(small, false, true, m, lk, a.Q.dh, a.scale, qk.q(i), qk.q_ld(), qk.k(i), qk.k_ld(), T(0),
          s + (i - t.i0) * size, lk);
  });
  return S;
}

// The dropout mask of a tile's scores, the elements (i0 · lq + r0) · lk ...
// of the problem's mask: none without dropout; drawn where applied in a
// forward, which applies it once; in a backward (twice: the probabilities
// kept for dV, then dS) and a joint pass (three times) drawn once as bytes
// and applied from them (dropout.h: the same bits).
struct TileMask {
  uint64_t seed = 0;
  double p = 0;
  int64_t offset = 0;
  std::optional<DropoutKeeps> keeps;

  TileMask(bool reused, int64_t elements, uint64_t seed_, double p_, int64_t offset_)
      : seed(seed_), p(p_), offset(offset_) {
    if (p > 0 && reused) keeps.emplace(elements, seed, p, offset);
  }
  void apply_(torch::Tensor& t) const {
    if (keeps)
      keeps->apply_(t);
    else if (p > 0)
      apply_dropout_mask_(t, seed, p, offset);
  }
  torch::Tensor applied(const torch::Tensor& t) const {
    if (keeps) return keeps->applied(t);
    return p > 0 ? dropout_masked(t, seed, p, offset) : t;
  }
};

// A tile's forward from its scores P: softmax (its rows' log-sum-exp into
// lse), dropout, and the output rows.
template <typename T>
void tile_forward(const Problem& pr, const Tile& t, torch::Tensor& P, const Operands<T>& a, const TileMask& mask) {
  const int64_t m = t.rows(), lk = pr.lk, size = m * lk, dh = a.Q.dh;
  const bool small = small_products(pr, dh);
  std::vector<T> row_lse(size_t(t.items() * m));
  softmax_rows(P.data_ptr<T>(), t.items() * m, lk, row_lse.data());
  mask.apply_(P);
  const T* p = P.data_ptr<T>();
  products(t.i0, t.i1, m, dh, lk, [&](int64_t i) {
    mm<T>(small, false, false, m, dh, lk, T(1), p + (i - t.i0) * size, lk, key_rows(pr, a.V, a.H, i), a.V.ld, T(0),
          query_rows(pr, a.O, a.H, i, t.r0), a.O.ld);
  });
  tile_to_rows(pr, t, a.H, row_lse.data(), a.lse);
}

// Σ_d dO · O of each of a tile's rows (item-major, as its scores), in
// fixed lanes (lane_sum.h): the same bits wherever a tile's backward runs.
template <typename T>
void tile_row_dots(const Problem& pr, const Tile& t, const Operands<T>& a, T* to) {
  const int64_t dh = a.O.dh;
  for (int64_t i = t.i0; i < t.i1; ++i)
    for (int64_t j = t.r0; j < t.r1; ++j) {
      const T *o = query_rows(pr, a.O, a.H, i, j), *g = query_rows(pr, a.dO, a.H, i, j);
      *to++ = lane_sum<T>(dh, [&](int64_t d) { return g[d] * o[d]; });
    }
}

// A tile's backward from its scores P: the probabilities again from lse,
// then dV, dP, dS, dQ and dK into their rows (through the norm's backward
// where it runs). Each key row belongs to one sequence, so dK and dV sum
// only over an item's row blocks (the first block writes, the next ones
// add).
template <typename T>
void tile_backward(const Problem& pr, const Tile& t, torch::Tensor& P, const Operands<T>& a, TileQK<T>& qk,
                   const TileMask& mask) {
  const int64_t m = t.rows(), lk = pr.lk, size = m * lk, dh = a.Q.dh, H = a.H;
  const T add = t.r0 == 0 ? T(0) : T(1);  // dK, dV: the item's first row block writes, the next ones add
  const bool small = small_products(pr, dh);
  std::vector<T> stats(size_t(t.items() * m));  // each row's lse, then its Σ dO · O
  rows_to_tile(pr, t, H, a.lse, stats.data());
  exp_rows_minus(P.data_ptr<T>(), t.items() * m, lk, stats.data());  // the probabilities again
  const torch::Tensor kept = mask.applied(P);
  const T* pk = kept.data_ptr<T>();
  products(t.i0, t.i1, lk, dh, m, [&](int64_t i) {
    mm<T>(small, true, false, lk, dh, m, T(1), pk + (i - t.i0) * size, lk, query_rows(pr, a.dO, H, i, t.r0), a.dO.ld,
          add, key_rows(pr, a.dV, H, i), a.dV.ld);
  });
  torch::Tensor dS = torch::empty({t.items(), m, lk}, a.options);
  T* ds = dS.data_ptr<T>();
  products(t.i0, t.i1, m, lk, dh, [&](int64_t i) {
    mm<T>(small, false, true, m, lk, dh, T(1), query_rows(pr, a.dO, H, i, t.r0), a.dO.ld, key_rows(pr, a.V, H, i),
          a.V.ld, T(0), ds + (i - t.i0) * size, lk);
  });
  mask.apply_(dS);
  tile_row_dots(pr, t, a, stats.data());
  // dS / scale: the products below take the scale
  softmax_grad_rows(ds, P.data_ptr<T>(), t.items() * m, lk, stats.data());
  products(t.i0, t.i1, m, dh, lk, [&](int64_t i) {
    mm<T>(small, false, false, m, dh, lk, a.scale, ds + (i - t.i0) * size, lk, qk.k(i), qk.k_ld(), T(0), qk.dq(i),
          qk.dq_ld());
  });
  qk.q_grads_done();
  products(t.i0, t.i1, lk, dh, m, [&](int64_t i) {
    mm<T>(small, true, false, lk, dh, m, a.scale, ds + (i - t.i0) * size, lk, qk.q(i), qk.q_ld(), add, qk.dk(i),
          qk.dk_ld());
  });
  qk.key_grads_done();
}

// One problem, tile by tile: its forward; its backward; or both at once
// (a core run again in a lean backward: the scores computed once, the
// output and lse as the forward gave them, then the backward as it runs).
enum class Pass { Forward, Backward, Joint };
template <typename T>
void run_problem(Pass pass, const Problem& pr, const Operands<T>& a, uint64_t seed) {
  typename TileQK<T>::Scratch keys;
  for_each_tile(pr.n() * a.H, pr.lq, pr.lk, int64_t(sizeof(T)), [&](const Tile& t) {
    TileQK<T> qk(pr, t, a, keys);
    const TileMask mask(pass != Pass::Forward, t.items() * t.rows() * pr.lk, seed, a.dropout,
                        (t.i0 * pr.lq + t.r0) * pr.lk);
    torch::Tensor P = tile_scores(pr, t, a, qk);
    if (pass == Pass::Backward) return tile_backward(pr, t, P, a, qk, mask);
    torch::Tensor S = pass == Pass::Joint ? P.clone() : torch::Tensor();
    tile_forward(pr, t, P, a, mask);
    if (pass != Pass::Joint) return;
    P = torch::Tensor();  // backward holds three score tiles, as it does alone
    tile_backward(pr, t, S, a, qk, mask);
  });
}

}  // namespace wg::kernel
