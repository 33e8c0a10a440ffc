// The CPU attention kernel (see attention_kernel.h; the cores' entry
// points are in attention_core.cpp).
//
// Its invariants:
// - a "problem" is n sequences that attend among themselves, each of lq
//   query and lk key rows: varlen segments of one (lq, lk) shape batched
//   together (gathered by row index, no padding; with gathered keys, only
//   within one range of segments, below), or a chunk of dense
//   sequences; problems share no query, key or output row, so they run in
//   parallel and write their results without locks, and they are formed
//   without regard to the thread count: the result does not depend on it;
// - q, k and v are column blocks ("slots") of row tensors ("sources", [R,
//   W]): the fused projections as the layers made them; every product
//   reads its operands and writes its result where they lie (BLAS, or
//   small_gemm for the problems small_products picks, with the row stride
//   as leading dimension): no rows gathered or scattered
//   (but cross-attention's keys and values given as rows kv_rows of kv:
//   gathered before the call), and outputs zero-filled only when some rows
//   lie in no problem; backward gives one gradient per source, each slot's
//   columns written in place;
// - the q/k norm (head_norm.h) reads q and k in their slots and writes its
//   backward into them;
// - forward keeps the sources, the output and the log-sum-exp of each
//   score row ([Rq, H]), and, normed and not lean, the normed q and k;
//   backward recomputes the probabilities from them, and each score
//   row's Σ dO · O per tile (8 fixed lanes);
// - a tile's softmax, the probabilities made again from the lse, and the
//   scores' gradient run row by row in place (softmax_rows.h), each a
//   function of the row alone;
// - a joint pass (a core run again in a lean backward) runs forward and
//   backward tile by tile on the forward's tiles: the scores computed
//   once, the output and log-sum-exp written as the forward writes them,
//   then the backward as it runs, so its output and gradients have the
//   forward's and backward's bits; with gathered keys and values it
//   gathers them one range of segments at a time (its problems never span
//   two), and sums each range's gradient into kv's rows in kv_rows'
//   order, as index_select's backward sums them;
// - with dropout, problem i's keep-mask is made from the seed (seed, i)
//   (dropout.h); seed is drawn once per call from the CPU generator, so a
//   recomputed piece (its generator states restored) draws the same masks;
// - a segment without keys gives 0 and no gradient; one without queries is
//   skipped.
#include "attention_kernel.h"

#include "wg/model/dropout.h"
#include "wg/model/head_norm.h"
#include "wg/model/lane_sum.h"
#include "wg/model/small_gemm.h"
#include "wg/model/softmax_rows.h"
#include "wg/util/blas.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <tuple>
#include <type_traits>
#include <utility>

namespace wg::kernel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// At most 8 MiB of scores per problem, and a group cut into about 8
// problems (at least 16 sequences each) for the threads to share.
int64_t chunk_size(int64_t n, int64_t H, int64_t lq, int64_t lk, int64_t element_size) {
  const int64_t by_memory = std::max<int64_t>(1, (int64_t(8) << 20) / std::max<int64_t>(1, H * lq * lk * element_size));
  return std::max<int64_t>(1, std::min(by_memory, std::max<int64_t>(16, (n + 7) / 8)));
}

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

// A problem's float products go to small_gemm (small_gemm.h: AVX-512
// register tiles over the rows where they lie) when its sequences have at
// least 16 query and key rows and each product is at most 64³
// multiply-adds (lq · lk · dh): there OpenBLAS would run them on one
// thread anyway (it splits a product over threads only above 4 · 65536)
// and its small-matrix path reads a head's strided rows slowly (the
// embed's 79 channels). Shorter sequences (cells of a few points), where
// BLAS's small path is quicker, and larger products (a dense engine's long
// sequences), which BLAS may split over the rank's threads when a call has
// one problem, go to BLAS. Decided by the problem's shape alone, so a
// forward, a backward and a joint pass, on any number of threads, take the
// same path and give the same bits.
bool small_products(const Problem& pr, int64_t dh) {
  return std::min(pr.lq, pr.lk) >= 16 && pr.lq * pr.lk * dh <= int64_t(64 * 64 * 64);
}

// c = alpha · op(a) · op(b) + beta · c, row-major with leading dimensions:
// by small_gemm where `small` and the CPU has AVX-512, else through BLAS
// (wg/util/blas.h; the kernel runs only where the process has one).
template <typename T>
void mm(bool small, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
        const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (small && small_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Runs product(i) for items [first, last) of a problem, seen by LibTorch's
// profiler as the one bmm they make together ([items, m, k] · [items, k,
// n]: its FLOP count; Flops.* check ours against it).
template <typename F>
void products(int64_t first, int64_t last, int64_t m, int64_t n, int64_t k, const F& product) {
  const auto meta = torch::TensorOptions().device(torch::kMeta);
  RECORD_FUNCTION("aten::bmm", std::vector<c10::IValue>({torch::empty({last - first, m, k}, meta),
                                                         torch::empty({last - first, k, n}, meta)}));
  for (int64_t i = first; i < last; ++i) product(i);
}

uint64_t problem_seed(uint64_t seed, int64_t i) { return seed ^ (uint64_t(i + 1) * 0x9E3779B97F4A7C15ull); }

// Runs fn(i) for every problem: one problem inline (its products may use
// every thread), more in parallel over the rank's threads, taken one at a
// time (cells differ in size), each worker marked as in a parallel region
// so the products inside stay on it. Needs this file compiled with OpenMP
// (CMakeLists.txt); without, it runs serially.
template <typename F>
void for_each_problem(int64_t count, const F& fn) {
  const int threads = at::get_num_threads();
  if (count == 1 || threads == 1 || at::in_parallel_region()) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::exception_ptr error;
  std::atomic_flag failed = ATOMIC_FLAG_INIT;
#pragma omp parallel num_threads(threads)
  {
    const at::internal::ThreadIdGuard in_region(omp_get_thread_num());
    const at::NoGradGuard no_grad;  // worker threads start with grad mode on
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < count; ++i) {
      try {
        fn(i);
      } catch (...) {
        if (!failed.test_and_set()) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// A problem is worked through in tiles whose score matrices stay in the
// core's cache: items [i0, i1) (item = sequence · H + head), query rows
// [r0, r1) of each. Short sequences: several whole items per tile; long
// ones: one item, a block of its rows. A tile's scores are then the
// contiguous elements (i0 · lq + r0) · lk ... of the problem's
// [items, lq, lk] score tensor (dropout's mask offsets).
constexpr int64_t kTileBytes = int64_t(512) << 10;  // one score tile; backward holds three

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
    for (int64_t j = t.r0; j < t.r1; ++j)
      *to++ = from[(pr.q_first[size_t(i / H)] + j) * H + i % H];
}
template <typename T>
void tile_to_rows(const Problem& pr, const Tile& t, int64_t H, const T* from, T* to) {
  for (int64_t i = t.i0; i < t.i1; ++i)
    for (int64_t j = t.r0; j < t.r1; ++j)
      to[(pr.q_first[size_t(i / H)] + j) * H + i % H] = *from++;
}

// The operands of one call as rows: q and k (normed where the norm runs),
// v, the output and its rows' log-sum-exp ([R, H]); in backward also the
// output's gradient and q's, k's and v's (written in place).
template <typename T>
struct Operands {
  Rows<T> Q, K, V, O, dO, dQ, dK, dV;
  T* lse;
  int64_t H;
  T scale;
  double dropout;
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

// A tile's scores q kᵀ · scale: [items, rows, lk].
template <typename T>
torch::Tensor tile_scores(const Problem& pr, const Tile& t, const Operands<T>& a) {
  const int64_t m = t.rows(), lk = pr.lk, size = m * lk;
  const bool small = small_products(pr, a.Q.dh);
  torch::Tensor S = torch::empty({t.items(), m, lk}, a.options);
  T* s = S.data_ptr<T>();  // s + (i - i0) · size: item i's scores
  products(t.i0, t.i1, m, lk, a.Q.dh, [&](int64_t i) {
    mm<T>(small, false, true, m, lk, a.Q.dh, a.scale, query_rows(pr, a.Q, a.H, i, t.r0), a.Q.ld,
          key_rows(pr, a.K, a.H, i), a.K.ld, T(0), s + (i - t.i0) * size, lk);
  });
  return S;
}

// A tile's forward from its scores P: softmax (its rows' log-sum-exp into
// lse), dropout, and the output rows.
template <typename T>
void tile_forward(const Problem& pr, const Tile& t, torch::Tensor& P, const Operands<T>& a, uint64_t seed) {
  const int64_t m = t.rows(), lk = pr.lk, size = m * lk, dh = a.Q.dh;
  const bool small = small_products(pr, dh);
  std::vector<T> row_lse(size_t(t.items() * m));
  softmax_rows(P.data_ptr<T>(), t.items() * m, lk, row_lse.data());
  if (a.dropout > 0) apply_dropout_mask_(P, seed, a.dropout, (t.i0 * pr.lq + t.r0) * lk);
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
// then dV, dP, dS, dQ and dK into their rows. Each key row belongs to one
// sequence, so dK and dV sum only over an item's row blocks (the first
// block writes, the next ones add).
template <typename T>
void tile_backward(const Problem& pr, const Tile& t, torch::Tensor& P, const Operands<T>& a, uint64_t seed) {
  const int64_t m = t.rows(), lk = pr.lk, size = m * lk, dh = a.Q.dh, offset = (t.i0 * pr.lq + t.r0) * lk, H = a.H;
  const T add = t.r0 == 0 ? T(0) : T(1);  // dK, dV: the item's first row block writes, the next ones add
  const bool small = small_products(pr, dh);
  std::vector<T> stats(size_t(t.items() * m));  // each row's lse, then its Σ dO · O
  rows_to_tile(pr, t, H, a.lse, stats.data());
  exp_rows_minus(P.data_ptr<T>(), t.items() * m, lk, stats.data());  // the probabilities again
  torch::Tensor kept = P;
  if (a.dropout > 0) {
    kept = P.clone();
    apply_dropout_mask_(kept, seed, a.dropout, offset);
  }
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
  if (a.dropout > 0) apply_dropout_mask_(dS, seed, a.dropout, offset);
  tile_row_dots(pr, t, a, stats.data());
  // dS / scale: the products below take the scale
  softmax_grad_rows(ds, P.data_ptr<T>(), t.items() * m, lk, stats.data());
  products(t.i0, t.i1, m, dh, lk, [&](int64_t i) {
    mm<T>(small, false, false, m, dh, lk, a.scale, ds + (i - t.i0) * size, lk, key_rows(pr, a.K, H, i), a.K.ld, T(0),
          query_rows(pr, a.dQ, H, i, t.r0), a.dQ.ld);
  });
  products(t.i0, t.i1, lk, dh, m, [&](int64_t i) {
    mm<T>(small, true, false, lk, dh, m, a.scale, ds + (i - t.i0) * size, lk, query_rows(pr, a.Q, H, i, t.r0), a.Q.ld,
          add, key_rows(pr, a.dK, H, i), a.dK.ld);
  });
}

// One problem, tile by tile: its forward; its backward; or both at once
// (a core run again in a lean backward: the scores computed once, the
// output and lse as the forward gave them, then the backward as it runs).
enum class Pass { Forward, Backward, Joint };
template <typename T>
void run_problem(Pass pass, const Problem& pr, const Operands<T>& a, uint64_t seed) {
  for_each_tile(pr.n() * a.H, pr.lq, pr.lk, int64_t(sizeof(T)), [&](const Tile& t) {
    torch::Tensor P = tile_scores(pr, t, a);
    if (pass == Pass::Backward) return tile_backward(pr, t, P, a, seed);
    torch::Tensor S = pass == Pass::Joint ? P.clone() : torch::Tensor();
    tile_forward(pr, t, P, a, seed);
    if (pass != Pass::Joint) return;
    P = torch::Tensor();  // backward holds three score tiles, as it does alone
    tile_backward(pr, t, S, a, seed);
  });
}

// Where q, k or v lies: the columns [col, col + H·dh) of source src's
// rows ([R, W], the columns contiguous).
struct Slot {
  size_t src = 0;
  int64_t col = 0;
};

// One call of the kernel: which rows attend to which, where q, k and v
// lie, and what is done to them.
struct Call : torch::CustomClassHolder {
  c10::intrusive_ptr<Problems> problems;
  Slot q, k, v;
  int64_t heads = 0, dh = 0;
  double dropout = 0, qk_norm_eps = 0;
  bool lean = false;  // with the q/k norm: keep the sources only, norm again in backward
  bool norms() const { return qk_norm_eps > 0; }
};

template <typename T>
Rows<T> slot_rows(const torch::Tensor& source, const Slot& s, int64_t dh) {
  return {source.data_ptr<T>() + s.col, source.stride(0), dh};
}

// q or k normed per head ([R, H, dh] contiguous) with its rows' rstd [R, H].
struct Normed {
  torch::Tensor rows, rstd;
};
Normed norm_slot(const torch::Tensor& source, const Slot& s, const Call& c) {
  const int64_t R = source.size(0);
  Normed n{torch::empty({R, c.heads, c.dh}, source.options()), torch::empty({R, c.heads}, source.options())};
  AT_DISPATCH_FLOATING_TYPES(source.scalar_type(), "head norm", [&] {
    head_norm_forward(source.data_ptr<scalar_t>() + s.col, source.stride(0), R, c.heads, c.dh, c.qk_norm_eps,
                      n.rows.data_ptr<scalar_t>(), n.rstd.data_ptr<scalar_t>());
  });
  return n;
}

// A gradient every problem writes whole, or zeros when some rows lie in no problem.
torch::Tensor written_whole(at::IntArrayRef sizes, const torch::TensorOptions& options, bool whole) {
  return whole ? torch::empty(sizes, options) : torch::zeros(sizes, options);
}

// One gradient per source; zeros unless the problems write every row and
// the slots every column.
std::vector<torch::Tensor> source_grads(const Call& c, const std::vector<torch::Tensor>& sources) {
  std::vector<torch::Tensor> d;
  for (size_t i = 0; i < sources.size(); ++i) {
    int64_t columns = 0;
    for (const Slot* s : {&c.q, &c.k, &c.v}) columns += s->src == i ? c.heads * c.dh : 0;
    d.push_back(written_whole(sources[i].sizes(), sources[i].options(),
                              c.problems->covers_all && columns == sources[i].size(1)));
  }
  return d;
}

// Runs `pass` over problems `list` of call c on its sources, list[i]
// being the call's problem first + i (its dropout seed): q and k read
// normed (qn, kn) where the norm runs; out [Rq, H, dh] and lse [Rq, H];
// in backward d_out [Rq, H, dh] contiguous and the sources' gradients
// (of the normed q and k: see norm_backward).
void run_problems(Pass pass, const Call& c, const std::vector<Problem>& list, size_t first,
                  const std::vector<torch::Tensor>& sources, const Normed& qn, const Normed& kn, const torch::Tensor& out,
                  const torch::Tensor& lse, const torch::Tensor& d_out, const std::vector<torch::Tensor>& d_sources,
                  uint64_t seed) {
  const torch::Tensor &qs = sources[c.q.src], &ks = sources[c.k.src], &vs = sources[c.v.src];
  const int64_t dh = c.dh;
  AT_DISPATCH_FLOATING_TYPES(qs.scalar_type(), "attention", [&] {
    using Rs = Rows<scalar_t>;
    const auto in = [&](const Normed& normed, const torch::Tensor& source, const Slot& s) {
      return c.norms() ? rows_view<scalar_t>(normed.rows) : slot_rows<scalar_t>(source, s, dh);
    };
    const auto grad = [&](const Slot& s) {
      return pass == Pass::Forward ? Rs{nullptr, 0, dh} : slot_rows<scalar_t>(d_sources[s.src], s, dh);
    };
    const Operands<scalar_t> a{in(qn, qs, c.q),
                               in(kn, ks, c.k),
                               slot_rows<scalar_t>(vs, c.v, dh),
                               rows_view<scalar_t>(out),
                               pass == Pass::Forward ? Rs{nullptr, 0, dh} : rows_view<scalar_t>(d_out),
                               grad(c.q),
                               grad(c.k),
                               grad(c.v),
                               lse.data_ptr<scalar_t>(),
                               c.heads,
                               scalar_t(1.0 / std::sqrt(double(dh))),
                               c.dropout,
                               qs.options()};
    for_each_problem(int64_t(list.size()), [&](int64_t i) {
      run_problem(pass, list[size_t(i)], a, problem_seed(seed, int64_t(first) + i));
    });
  });
}

// Back through the q/k norm (normed: q or k as normed in slot s of a
// source), in place in that source's gradient's columns.
void norm_backward(const Call& c, const Normed& normed, const Slot& s, const torch::Tensor& d_source) {
  AT_DISPATCH_FLOATING_TYPES(d_source.scalar_type(), "head norm backward", [&] {
    scalar_t* d = d_source.data_ptr<scalar_t>() + s.col;
    const int64_t ld = d_source.stride(0);
    head_norm_backward(d, ld, normed.rows.data_ptr<scalar_t>(), normed.rstd.data_ptr<scalar_t>(), normed.rows.size(0),
                       c.heads, c.dh, d, ld);
  });
}

// Runs `pass` over every problem of call c (run_problems), then in
// backward back through the norms.
void run_call(Pass pass, const Call& c, const std::vector<torch::Tensor>& sources, const Normed& qn, const Normed& kn,
              const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& d_out,
              const std::vector<torch::Tensor>& d_sources, uint64_t seed) {
  run_problems(pass, c, c.problems->list, 0, sources, qn, kn, out, lse, d_out, d_sources, seed);
  if (pass == Pass::Forward || !c.norms()) return;
  norm_backward(c, qn, c.q, d_sources[c.q.src]);
  norm_backward(c, kn, c.k, d_sources[c.k.src]);
}

// What a forward (and a joint pass) starts from: q and k normed where the
// norm runs, the output [Rq, H, dh] and lse [Rq, H] (rows in no problem:
// 0, and an lse never read), and the dropout seed, drawn last from the CPU
// generator, so that a joint pass after the generators are restored
// draws the forward's seed.
struct Started {
  Normed qn, kn;
  torch::Tensor out, lse;
  uint64_t seed = 0;
};
// (KNorm::Elsewhere: k is normed by the caller, as a gathered joint pass
// does range by range.)
enum class KNorm { Here, Elsewhere };
Started start(const Call& c, const std::vector<torch::Tensor>& sources, KNorm k_norm = KNorm::Here) {
  Started r;
  const torch::Tensor& qs = sources[c.q.src];
  if (c.norms()) {
    r.qn = norm_slot(qs, c.q, c);
    if (k_norm == KNorm::Here) r.kn = norm_slot(sources[c.k.src], c.k, c);
  }
  r.out = written_whole({qs.size(0), c.heads, c.dh}, qs.options(), c.problems->covers_all);
  r.lse = torch::empty({qs.size(0), c.heads}, qs.options());
  r.seed = c.dropout > 0 ? draw_dropout_seed() : 0;
  return r;
}

// Inputs: the sources ([R, W] rows, each column block of H·dh a slot);
// output [Rq, H, dh]. Keeps the sources, the output, each row's
// log-sum-exp and (q/k norm, not lean) the normed q and k; backward
// returns one gradient per source, q, k and v written into their columns.
struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const c10::intrusive_ptr<Call>& call, at::TensorList sources) {
    const Call& c = *call;
    const std::vector<torch::Tensor> in(sources.begin(), sources.end());
    const Started r = start(c, in);
    run_call(Pass::Forward, c, in, r.qn, r.kn, r.out, r.lse, {}, {}, r.seed);
    variable_list keep(sources.begin(), sources.end());
    keep.insert(keep.end(), {r.out, r.lse});
    if (c.norms() && !c.lean) keep.insert(keep.end(), {r.qn.rows, r.qn.rstd, r.kn.rows, r.kn.rstd});
    ctx->save_for_backward(keep);
    ctx->saved_data["call"] = c10::IValue::make_capsule(call);
    ctx->saved_data["seed"] = int64_t(r.seed);
    return r.out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto call = c10::static_intrusive_pointer_cast<Call>(ctx->saved_data["call"].toCapsule());
    const Call& c = *call;
    const uint64_t seed = uint64_t(ctx->saved_data["seed"].toInt());
    const variable_list saved = ctx->get_saved_variables();
    const size_t n = saved.size() - (c.norms() && !c.lean ? 6 : 2);  // the sources
    const std::vector<torch::Tensor> sources(saved.begin(), saved.begin() + long(n));
    const torch::Tensor &out = saved[n], &lse = saved[n + 1];
    Normed qn, kn;  // the normed q and k: kept, or made again
    if (c.norms()) {
      qn = c.lean ? norm_slot(sources[c.q.src], c.q, c) : Normed{saved[n + 2], saved[n + 3]};
      kn = c.lean ? norm_slot(sources[c.k.src], c.k, c) : Normed{saved[n + 4], saved[n + 5]};
    }
    // dQ and dK (of the normed rows, with the norm) go into the sources'
    // columns, then back through the norm in place.
    const std::vector<torch::Tensor> d_sources = source_grads(c, sources);
    run_call(Pass::Backward, c, sources, qn, kn, out, lse, grads[0].detach().contiguous(), d_sources, seed);
    variable_list result{torch::Tensor()};  // the call
    result.insert(result.end(), d_sources.begin(), d_sources.end());
    return result;
  }
};

// The call's forward and backward at once, without a graph (a core run
// again in a lean backward): the output as the forward gave it, and the
// sources' gradients for d_out; the dropout seed drawn as the forward drew it.
std::pair<torch::Tensor, std::vector<torch::Tensor>> run_joint(const Call& c, const std::vector<torch::Tensor>& sources,
                                                               const torch::Tensor& d_out) {
  const Started r = start(c, sources);
  std::vector<torch::Tensor> d_sources = source_grads(c, sources);
  run_call(Pass::Joint, c, sources, r.qn, r.kn, r.out, r.lse, d_out.contiguous(), d_sources, r.seed);
  return {r.out, std::move(d_sources)};
}

// run_joint for a cross-attention whose keys and values are rows kv_rows
// of kv (q [Rq, H·dh], kv [Rkv, 2·H·dh]; slots q {0, 0}, k {1, 0}, v {1,
// H·dh}), the problems cut at ranges of segments: range by range, its rows
// gathered (and k normed), its problems run with their seeds in the whole
// call, back through k's norm, and the range's gradient summed into kv's
// rows in kv_rows' order (as index_select's backward sums, one index_add_
// after another); then back through q's norm. Returns the output and the
// gradients of q and kv.
std::pair<torch::Tensor, std::vector<torch::Tensor>> run_joint_gathered(const Call& c, const torch::Tensor& q,
                                                                        const torch::Tensor& kv,
                                                                        const torch::Tensor& kv_rows,
                                                                        const torch::Tensor& d_out) {
  const std::vector<KeyRange>& ranges = c.problems->ranges;
  TORCH_INTERNAL_ASSERT(ranges.empty() ? c.problems->list.empty() : ranges.back().end == c.problems->list.size(),
                        "gathered joint pass: the problems were not formed range by range");
  const Started r = start(c, {q, kv}, KNorm::Elsewhere);
  const torch::Tensor d_o = d_out.contiguous();
  const torch::Tensor d_q = written_whole(q.sizes(), q.options(), c.problems->covers_all);
  const torch::Tensor d_kv = torch::zeros(kv.sizes(), kv.options());
  for (const KeyRange& range : ranges) {
    const torch::Tensor ids = kv_rows.slice(0, range.k_begin, range.k_end);  // the range's rows of kv
    const torch::Tensor kv_range = kv.index_select(0, ids);
    const Normed kn = c.norms() ? norm_slot(kv_range, c.k, c) : Normed{};
    const torch::Tensor d_range = written_whole(kv_range.sizes(), kv_range.options(), c.problems->covers_all);
    std::vector<Problem> list(c.problems->list.begin() + long(range.first), c.problems->list.begin() + long(range.end));
    for (Problem& pr : list)
      for (int64_t& k : pr.k_first) {
        k -= range.k_begin;  // rows of kv_range
        TORCH_INTERNAL_ASSERT(k >= 0 && k + pr.lk <= kv_range.size(0),
                              "gathered joint pass: a problem spans two ranges");
      }
    run_problems(Pass::Joint, c, list, range.first, {q, kv_range}, r.qn, kn, r.out, r.lse, d_o, {d_q, d_range},
                 r.seed);
    if (c.norms()) norm_backward(c, kn, c.k, d_range);
    d_kv.index_add_(0, ids, d_range);
  }
  if (c.norms()) norm_backward(c, r.qn, c.q, d_q);
  return {r.out, {d_q, d_kv}};
}

// t [..., W] as rows [R, W] under autograd (a view where its layout
// allows), as the kernel reads a source: columns contiguous, rows at least
// W apart.
torch::Tensor as_rows(const torch::Tensor& t, int64_t W) {
  const torch::Tensor r = t.reshape({-1, W});
  const bool readable = r.stride(1) == 1 && (r.size(0) < 2 || r.stride(0) >= W);
  return readable ? r : r.contiguous();
}

// A call of the kernel.
c10::intrusive_ptr<Call> make_call(Slot q, Slot k, Slot v, int64_t heads, int64_t dh, c10::intrusive_ptr<Problems> problems,
                                   double dropout, const QkNorm& norm) {
  auto call = c10::make_intrusive<Call>();
  call->problems = std::move(problems);
  call->q = q;
  call->k = k;
  call->v = v;
  call->heads = heads;
  call->dh = dh;
  call->dropout = dropout;
  call->qk_norm_eps = norm.eps;
  call->lean = norm.lean;
  return call;
}

// The kernel on sources [R_i, W_i] (under autograd) -> [Rq, H, dh].
torch::Tensor attend_sources(const std::vector<torch::Tensor>& sources, Slot q, Slot k, Slot v, int64_t heads,
                             int64_t dh, c10::intrusive_ptr<Problems> problems, double dropout, const QkNorm& norm) {
  const auto call = make_call(q, k, v, heads, dh, std::move(problems), dropout, norm);
  return AttentionFunction::apply(call, at::TensorList(sources));  // a TensorList: each one an input of the graph
}

// Projections as the kernel's sources and slots: self-attention's one
// source (q, k, v side by side), or cross-attention's two (q; k and v).
struct Sourced {
  std::vector<torch::Tensor> sources;
  Slot q, k, v;
};
// Gather::No: cross-attention's kv as given, not its rows kv_rows.
enum class Gather { Yes, No };
Sourced sourced(const Projections& p, Gather gather = Gather::Yes) {
  const int64_t inner = p.heads * p.dim_head();
  TORCH_CHECK(!(p.is_self() && p.kv_rows.defined()), "attention: kv_rows with self-attention");
  if (p.is_self()) return {{as_rows(p.q, 3 * inner)}, {0, 0}, {0, inner}, {0, 2 * inner}};
  return {{as_rows(p.q, inner), as_rows(gather == Gather::Yes ? p.segment_kv() : p.kv, 2 * inner)},
          {0, 0},
          {1, 0},
          {1, inner}};
}

}  // namespace

// Segments of one shape batched into problems, range of segments by
// range: ranges of at most range_rows key rows (at least one segment
// each), or one range of all segments (range_rows 0).
c10::intrusive_ptr<Problems> varlen_problems(const VarlenSegments& seg, int64_t H, int64_t element_size,
                                             int64_t range_rows) {
  auto out = c10::make_intrusive<Problems>();
  const auto key_offset = [&](int64_t s) { return seg.k_offsets[size_t(s)]; };  // segment s's first key row
  for (int64_t s0 = 0, s1 = 0; s0 < seg.num_segments; s0 = s1) {
    s1 = range_rows > 0 ? s0 + 1 : seg.num_segments;
    while (s1 < seg.num_segments && key_offset(s1 + 1) - key_offset(s0) <= range_rows) ++s1;
    std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> groups;  // (lq, lk) -> segments, in order
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t lq = seg.q_offsets[size_t(s) + 1] - seg.q_offsets[size_t(s)], lk = key_offset(s + 1) - key_offset(s);
      if (lq > 0 && lk > 0)
        groups[{lq, lk}].push_back(s);
      else if (lq > 0 || lk > 0)  // no keys: the output stays 0; no queries: the keys get no gradient
        out->covers_all = false;
    }
    const size_t first_problem = out->list.size();
    for (const auto& [shape, segments] : groups) {
      const auto [lq, lk] = shape;
      const int64_t chunk = chunk_size(int64_t(segments.size()), H, lq, lk, element_size);
      for (size_t first = 0; first < segments.size(); first += size_t(chunk)) {
        Problem pr{lq, lk, {}, {}};
        for (size_t i = first; i < std::min(segments.size(), first + size_t(chunk)); ++i) {
          pr.q_first.push_back(seg.q_offsets[size_t(segments[i])]);
          pr.k_first.push_back(key_offset(segments[i]));
        }
        out->list.push_back(std::move(pr));
      }
    }
    out->ranges.push_back({first_problem, out->list.size(), key_offset(s0), key_offset(s1)});
  }
  return out;
}

// B sequences of L rows each ([B·L, H, dh]).
c10::intrusive_ptr<Problems> dense_problems(int64_t B, int64_t L, int64_t H, int64_t element_size) {
  auto out = c10::make_intrusive<Problems>();
  if (L == 0) return out;
  const int64_t chunk = chunk_size(B, H, L, L, element_size);
  for (int64_t b = 0; b < B; b += chunk) {
    Problem pr{L, L, {}, {}};
    for (int64_t j = b; j < std::min(B, b + chunk); ++j) pr.q_first.push_back(j * L);
    pr.k_first = pr.q_first;
    out->list.push_back(std::move(pr));
  }
  return out;
}

// B sequences of L rows, each cut into blocks of `block` rows (the last may be shorter).
c10::intrusive_ptr<Problems> block_problems(int64_t B, int64_t L, int64_t block, int64_t H, int64_t element_size) {
  TORCH_CHECK(block > 0, "block-local attention: block size ", block);
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < L; t += block) lens.push_back(std::min(block, L - t));
  return varlen_problems(VarlenSegments::from_lengths(lens, lens, torch::kCPU), H, element_size);
}

// The kernel: on the CPU, float32/float64, with a BLAS in the process
// (Debian's LibTorch links one); elsewhere the padded reference runs.
bool runs_on(const torch::Tensor& q) {
  return q.device().is_cpu() && (q.scalar_type() == torch::kFloat || q.scalar_type() == torch::kDouble) &&
         blas_available();
}

// Self-attention (one source of q, k, v side by side) or cross (q; k and v side by side).
torch::Tensor attend(const Projections& p, c10::intrusive_ptr<Problems> problems, double dropout, const QkNorm& norm) {
  const Sourced s = sourced(p);
  return attend_sources(s.sources, s.q, s.k, s.v, p.heads, p.dim_head(), std::move(problems), dropout, norm);
}

// attend(p, ...)'s output and, for d_out, its backward at once, without a
// graph: the problems must be those the forward made.
CoreJoint attend_joint(const Projections& p, c10::intrusive_ptr<Problems> problems, double dropout, const QkNorm& norm,
                       const torch::Tensor& d_out) {
  const int64_t H = p.heads, dh = p.dim_head();
  if (!p.is_self() && p.kv_rows.defined()) {  // the keys and values gathered range by range
    const Sourced s = sourced(p, Gather::No);
    const torch::Tensor q = s.sources[0].detach(), kv = s.sources[1].detach();
    const auto call = make_call(s.q, s.k, s.v, H, dh, std::move(problems), dropout, norm);
    auto [out, d] = run_joint_gathered(*call, q, kv, p.kv_rows, d_out.reshape({q.size(0), H, dh}));
    return CoreJoint{out, d[0].view(p.q.sizes()), d[1].view(p.kv.sizes())};
  }
  Sourced s = sourced(p);
  for (torch::Tensor& t : s.sources) t = t.detach();
  const auto call = make_call(s.q, s.k, s.v, H, dh, std::move(problems), dropout, norm);
  const int64_t Rq = s.sources[0].size(0);
  auto [out, d] = run_joint(*call, s.sources, d_out.reshape({Rq, H, dh}));
  CoreJoint r;
  r.out = out;
  r.d_q = d[0].view(p.q.sizes());
  if (!p.is_self()) r.d_kv = d[1].view(p.kv.sizes());
  return r;
}

// Separate q, k, v [..., H, dh].
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     c10::intrusive_ptr<Problems> problems, double dropout, const QkNorm& norm) {
  const int64_t H = q.size(-2), dh = q.size(-1);
  return attend_sources({as_rows(q, H * dh), as_rows(k, H * dh), as_rows(v, H * dh)}, {0, 0}, {1, 0}, {2, 0}, H,
                        dh, std::move(problems), dropout, norm);
}

}  // namespace wg::kernel
