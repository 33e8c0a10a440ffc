// The attention cores (see header).
//
// The CPU kernel's invariants:
// - a "problem" is n sequences that attend among themselves, each of lq
//   query and lk key rows: varlen segments of one (lq, lk) shape batched
//   together (gathered by row index, no padding), or a chunk of dense
//   sequences; problems share no query, key or output row, so they run in
//   parallel and write their results without locks, and they are formed
//   without regard to the thread count: the result does not depend on it;
// - every product reads its operands and writes its result where they lie
//   in the [R, H, dh] row tensors (BLAS with the row stride as leading
//   dimension): no rows gathered or scattered, and outputs zero-filled only
//   when some rows lie in no problem;
// - forward keeps q, k, v, the output and the log-sum-exp of each score row
//   ([Rq, H]); backward recomputes the probabilities from them;
// - with dropout, problem i's keep-mask is made from the seed (seed, i)
//   (dropout.h); seed is drawn once per call from the CPU generator, so a
//   recomputed piece (its generator states restored) draws the same masks;
// - a segment without keys gives 0 and no gradient; one without queries is
//   skipped.
#include "wg/model/attention_core.h"

#include "wg/model/dropout.h"
#include "wg/model/norms.h"
#include "wg/util/blas.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <utility>

namespace wg {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---- the reference ------------------------------------------------------------

torch::Tensor softmax_attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& key_mask, double dropout, bool training) {
  // q [.., H, Lq, dh], k v [.., H, Lk, dh]
  const double scale = 1.0 / std::sqrt(double(q.size(-1)));
  torch::Tensor s = torch::matmul(q, k.transpose(-2, -1)) * scale;
  if (key_mask.defined()) s = s.masked_fill(key_mask, kNegInf);
  torch::Tensor p = torch::softmax(s, -1);
  if (dropout > 0 && training) p = torch::dropout(p, dropout, true);
  return torch::matmul(p, v);
}

// q, k, v [.., H, L, dh] on a device with scaled_dot_product_attention (LibTorch 2):
// flash or memory-efficient kernels; key_mask true = masked out.
torch::Tensor device_attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& key_mask, double dropout, bool training) {
#if TORCH_VERSION_MAJOR >= 2
  const std::optional<at::Tensor> keep =
      key_mask.defined() ? std::optional<at::Tensor>(key_mask.logical_not()) : std::nullopt;
  return at::scaled_dot_product_attention(q, k, v, keep, training ? dropout : 0.0, false);
#else
  return softmax_attend(q, k, v, key_mask, dropout, training);
#endif
}

// ---- the CPU kernel -------------------------------------------------------------

// A problem: sequences of one shape, lq query and lk key rows each, in
// [R, H, dh] row tensors: sequence j's query rows start at row q_first[j],
// its key rows at k_first[j]. Varlen segments of the same (lq, lk) are
// batched into one problem (no padding); dense sequences are taken in
// chunks. Problems are formed without regard to the thread count, so
// dropout's masks (per problem) are too.
struct Problem {
  int64_t lq = 0, lk = 0;
  std::vector<int64_t> q_first, k_first;
  int64_t n() const { return int64_t(q_first.size()); }
};

struct Problems : torch::CustomClassHolder {
  std::vector<Problem> list;
  // Every query row and every key row lies in a sequence that has both, so
  // the products write every row of the outputs and gradients (no zero-fill).
  bool covers_all = true;
};

// At most 8 MiB of scores per problem, and a group cut into about 8
// problems (at least 16 sequences each) for the threads to share.
int64_t chunk_size(int64_t n, int64_t H, int64_t lq, int64_t lk, int64_t element_size) {
  const int64_t by_memory = std::max<int64_t>(1, (int64_t(8) << 20) / std::max<int64_t>(1, H * lq * lk * element_size));
  return std::max<int64_t>(1, std::min(by_memory, std::max<int64_t>(16, (n + 7) / 8)));
}

c10::intrusive_ptr<Problems> varlen_problems(const VarlenSegments& seg, int64_t H, int64_t element_size) {
  auto out = c10::make_intrusive<Problems>();
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> groups;  // (lq, lk) -> segments, in order
  for (int64_t s = 0; s < seg.num_segments; ++s) {
    const int64_t lq = seg.q_offsets[size_t(s) + 1] - seg.q_offsets[size_t(s)];
    const int64_t lk = seg.k_offsets[size_t(s) + 1] - seg.k_offsets[size_t(s)];
    if (lq > 0 && lk > 0)
      groups[{lq, lk}].push_back(s);
    else if (lq > 0 || lk > 0)  // no keys: the output stays 0; no queries: the keys get no gradient
      out->covers_all = false;
  }
  for (const auto& [shape, segments] : groups) {
    const auto [lq, lk] = shape;
    const int64_t chunk = chunk_size(int64_t(segments.size()), H, lq, lk, element_size);
    for (size_t first = 0; first < segments.size(); first += size_t(chunk)) {
      Problem pr{lq, lk, {}, {}};
      for (size_t i = first; i < std::min(segments.size(), first + size_t(chunk)); ++i) {
        pr.q_first.push_back(seg.q_offsets[size_t(segments[i])]);
        pr.k_first.push_back(seg.k_offsets[size_t(segments[i])]);
      }
      out->list.push_back(std::move(pr));
    }
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

// t [R, H, dh] detached, as the kernel reads it: rows may be strided (q, k
// and v cut from one fused projection), each row's [H, dh] contiguous.
torch::Tensor rows_of(const torch::Tensor& t) {
  const torch::Tensor d = t.detach();
  return d.stride(2) == 1 && d.stride(1) == d.size(2) ? d : d.contiguous();
}

// Head h of row r of a [R, H, dh] row tensor (rows_of's layout): the
// [rows, dh] matrix of one sequence and head starts at at(first row, h),
// its rows ld apart.
template <typename T>
struct Rows {
  T* data;
  int64_t ld, dh;
  T* at(int64_t row, int64_t h) const { return data + row * ld + h * dh; }
};
template <typename T>
Rows<T> rows_view(const torch::Tensor& t) {
  return {t.data_ptr<T>(), t.stride(0), t.size(2)};
}

// c = alpha · op(a) · op(b) + beta · c, row-major with leading dimensions,
// through BLAS (wg/util/blas.h; the kernel runs only where the process has one).
template <typename T>
void mm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
        int64_t ldb, T beta, T* c, int64_t ldc) {
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

// One problem's forward, tile by tile: scores, softmax (its rows'
// log-sum-exp into lse [R, H]), dropout, and the output rows.
template <typename T>
void forward_problem(const Problem& pr, const Rows<T>& Q, const Rows<T>& K, const Rows<T>& V, const Rows<T>& O,
                     T* lse, int64_t H, T scale, double dropout, uint64_t seed, const torch::TensorOptions& options) {
  const int64_t lq = pr.lq, lk = pr.lk, dh = Q.dh;
  const auto q_at = [&](const Rows<T>& r, int64_t i, int64_t row) { return r.at(pr.q_first[size_t(i / H)] + row, i % H); };
  const auto k_at = [&](const Rows<T>& r, int64_t i) { return r.at(pr.k_first[size_t(i / H)], i % H); };
  for_each_tile(pr.n() * H, lq, lk, int64_t(sizeof(T)), [&](const Tile& t) {
    const int64_t m = t.rows(), size = m * lk;
    torch::Tensor P = torch::empty({t.items(), m, lk}, options);
    T* p = P.data_ptr<T>();  // p + (i - i0) · size: item i's scores
    products(t.i0, t.i1, m, lk, dh, [&](int64_t i) {
      mm<T>(false, true, m, lk, dh, scale, q_at(Q, i, t.r0), Q.ld, k_at(K, i), K.ld, T(0), p + (i - t.i0) * size, lk);
    });
    const torch::Tensor row_max = P.amax(-1, true);  // (max(-1) would also find the indices: 5x the time)
    P.sub_(row_max).exp_();
    const torch::Tensor row_sum = P.sum(-1, true);
    const torch::Tensor row_lse = row_sum.log().add_(row_max);  // [items, m, 1]
    P.mul_(row_sum.reciprocal_());
    if (dropout > 0) apply_dropout_mask_(P, seed, dropout, (t.i0 * lq + t.r0) * lk);
    products(t.i0, t.i1, m, dh, lk, [&](int64_t i) {
      mm<T>(false, false, m, dh, lk, T(1), p + (i - t.i0) * size, lk, k_at(V, i), V.ld, T(0), q_at(O, i, t.r0), O.ld);
    });
    tile_to_rows(pr, t, H, row_lse.data_ptr<T>(), lse);
  });
}

// One problem's backward, tile by tile: the probabilities again from lse,
// then dV, dP, dS, dQ and dK into their rows. Each key row belongs to one
// sequence, so dK and dV sum only over an item's row blocks (the first
// block writes, the next ones add).
template <typename T>
void backward_problem(const Problem& pr, const Rows<T>& Q, const Rows<T>& K, const Rows<T>& V, const Rows<T>& dO,
                      const T* lse, const T* row_dot, const Rows<T>& dQ, const Rows<T>& dK, const Rows<T>& dV,
                      int64_t H, T scale, double dropout, uint64_t seed, const torch::TensorOptions& options) {
  const int64_t lq = pr.lq, lk = pr.lk, dh = Q.dh;
  const auto q_at = [&](const Rows<T>& r, int64_t i, int64_t row) { return r.at(pr.q_first[size_t(i / H)] + row, i % H); };
  const auto k_at = [&](const Rows<T>& r, int64_t i) { return r.at(pr.k_first[size_t(i / H)], i % H); };
  for_each_tile(pr.n() * H, lq, lk, int64_t(sizeof(T)), [&](const Tile& t) {
    const int64_t m = t.rows(), size = m * lk, offset = (t.i0 * lq + t.r0) * lk;
    const T add = t.r0 == 0 ? T(0) : T(1);  // dK, dV: the item's first row block writes, the next ones add
    torch::Tensor P = torch::empty({t.items(), m, lk}, options), stats = torch::empty({t.items(), m, 1}, options);
    T* p = P.data_ptr<T>();
    products(t.i0, t.i1, m, lk, dh, [&](int64_t i) {
      mm<T>(false, true, m, lk, dh, scale, q_at(Q, i, t.r0), Q.ld, k_at(K, i), K.ld, T(0), p + (i - t.i0) * size, lk);
    });
    rows_to_tile(pr, t, H, lse, stats.data_ptr<T>());
    P.sub_(stats).exp_();  // the probabilities again
    torch::Tensor kept = P;
    if (dropout > 0) {
      kept = P.clone();
      apply_dropout_mask_(kept, seed, dropout, offset);
    }
    const T* pk = kept.data_ptr<T>();
    products(t.i0, t.i1, lk, dh, m, [&](int64_t i) {
      mm<T>(true, false, lk, dh, m, T(1), pk + (i - t.i0) * size, lk, q_at(dO, i, t.r0), dO.ld, add, k_at(dV, i), dV.ld);
    });
    torch::Tensor dS = torch::empty({t.items(), m, lk}, options);
    T* ds = dS.data_ptr<T>();
    products(t.i0, t.i1, m, lk, dh, [&](int64_t i) {
      mm<T>(false, true, m, lk, dh, T(1), q_at(dO, i, t.r0), dO.ld, k_at(V, i), V.ld, T(0), ds + (i - t.i0) * size, lk);
    });
    if (dropout > 0) apply_dropout_mask_(dS, seed, dropout, offset);
    rows_to_tile(pr, t, H, row_dot, stats.data_ptr<T>());
    dS.sub_(stats).mul_(P);  // dS / scale: the products below take the scale
    products(t.i0, t.i1, m, dh, lk, [&](int64_t i) {
      mm<T>(false, false, m, dh, lk, scale, ds + (i - t.i0) * size, lk, k_at(K, i), K.ld, T(0), q_at(dQ, i, t.r0), dQ.ld);
    });
    products(t.i0, t.i1, lk, dh, m, [&](int64_t i) {
      mm<T>(true, false, lk, dh, m, scale, ds + (i - t.i0) * size, lk, q_at(Q, i, t.r0), Q.ld, add, k_at(dK, i), dK.ld);
    });
  });
}

// [R, H, dh] rows for an output or gradient every problem writes whole, or zeros when some rows are left out.
torch::Tensor output_rows(const torch::Tensor& like, const Problems& problems) {
  const auto options = like.options().memory_format(at::MemoryFormat::Contiguous);
  return problems.covers_all ? torch::empty(like.sizes(), options) : torch::zeros(like.sizes(), options);
}

// q, k, v [R, H, dh] rows; the problems say which rows attend to which.
struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in, const torch::Tensor& k_in,
                               const torch::Tensor& v_in, const c10::intrusive_ptr<Problems>& problems,
                               double dropout, double qk_norm_eps) {
    const bool norm = qk_norm_eps > 0;
    const torch::Tensor q = norm ? plain_layer_norm(q_in.detach(), qk_norm_eps) : rows_of(q_in);
    const torch::Tensor k = norm ? plain_layer_norm(k_in.detach(), qk_norm_eps) : rows_of(k_in);
    const torch::Tensor v = rows_of(v_in);
    const int64_t H = q.size(1);
    const double scale = 1.0 / std::sqrt(double(q.size(-1)));
    torch::Tensor out = output_rows(q, *problems);
    torch::Tensor lse = torch::empty({q.size(0), H}, q.options());  // rows in no problem are never read
    const uint64_t seed = dropout > 0 ? draw_dropout_seed() : 0;
    const std::vector<Problem>& list = problems->list;
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "attention forward", [&] {
      const Rows<scalar_t> Q = rows_view<scalar_t>(q), K = rows_view<scalar_t>(k), V = rows_view<scalar_t>(v),
                           O = rows_view<scalar_t>(out);
      scalar_t* l = lse.data_ptr<scalar_t>();
      for_each_problem(int64_t(list.size()), [&](int64_t i) {
        forward_problem(list[size_t(i)], Q, K, V, O, l, H, scalar_t(scale), dropout, problem_seed(seed, i), q.options());
      });
    });
    if (norm)  // q and k are normed again in backward from the rows they came from
      ctx->save_for_backward({rows_of(q_in), rows_of(k_in), v, out, lse});
    else
      ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["problems"] = c10::IValue::make_capsule(problems);
    ctx->saved_data["dropout"] = dropout;
    ctx->saved_data["qk_norm_eps"] = qk_norm_eps;
    ctx->saved_data["seed"] = int64_t(seed);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &v = saved[2], &out = saved[3], &lse = saved[4];
    const double qk_norm_eps = ctx->saved_data["qk_norm_eps"].toDouble();
    torch::Tensor q = saved[0], k = saved[1];
    LayerNormRun q_norm, k_norm;  // the norms of q and k again, with the stats their backward reads
    if (qk_norm_eps > 0) {
      q_norm = layer_norm_run(saved[0], qk_norm_eps);
      k_norm = layer_norm_run(saved[1], qk_norm_eps);
      q = q_norm.out;
      k = k_norm.out;
    }
    const auto problems = c10::static_intrusive_pointer_cast<Problems>(ctx->saved_data["problems"].toCapsule());
    const double dropout = ctx->saved_data["dropout"].toDouble();
    const uint64_t seed = uint64_t(ctx->saved_data["seed"].toInt());
    const int64_t H = q.size(1);
    const double scale = 1.0 / std::sqrt(double(q.size(-1)));
    const torch::Tensor d_out = grads[0].detach().contiguous();
    const torch::Tensor row_dot = (d_out * out).sum(-1);  // [Rq, H]: Σ_d dO · O per row and head
    torch::Tensor dq = output_rows(q, *problems), dk = output_rows(k, *problems), dv = output_rows(v, *problems);
    const std::vector<Problem>& list = problems->list;
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "attention backward", [&] {
      const Rows<scalar_t> Q = rows_view<scalar_t>(q), K = rows_view<scalar_t>(k), V = rows_view<scalar_t>(v),
                           dO = rows_view<scalar_t>(d_out), dQ = rows_view<scalar_t>(dq), dK = rows_view<scalar_t>(dk),
                           dV = rows_view<scalar_t>(dv);
      const scalar_t *l = lse.data_ptr<scalar_t>(), *rd = row_dot.data_ptr<scalar_t>();
      for_each_problem(int64_t(list.size()), [&](int64_t i) {
        backward_problem(list[size_t(i)], Q, K, V, dO, l, rd, dQ, dK, dV, H, scalar_t(scale), dropout,
                         problem_seed(seed, i), q.options());
      });
    });
    if (qk_norm_eps > 0) {  // back through the norms
      dq = plain_layer_norm_backward(dq, saved[0], q_norm);
      dk = plain_layer_norm_backward(dk, saved[1], k_norm);
    }
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The kernel: on the CPU, float32/float64, with a BLAS in the process
// (Debian's LibTorch links one); elsewhere the padded reference runs.
bool kernel_runs_on(const torch::Tensor& q) {
  return q.device().is_cpu() && (q.scalar_type() == torch::kFloat || q.scalar_type() == torch::kDouble) &&
         blas_available();
}

}  // namespace

namespace {
// Offsets always; the padded layout on `device` when `padded`.
VarlenSegments make_segments(const std::vector<int64_t>& lens_q, const std::vector<int64_t>& lens_k,
                             const torch::Device& device, bool padded) {
  TORCH_CHECK(lens_q.size() == lens_k.size(), "varlen attention: ", lens_q.size(), " query segments but ",
              lens_k.size(), " key segments");
  VarlenSegments s;
  s.num_segments = int64_t(lens_q.size());
  s.q_offsets.assign(1, 0);
  s.k_offsets.assign(1, 0);
  for (size_t i = 0; i < lens_q.size(); ++i) {
    s.max_q = std::max(s.max_q, lens_q[i]);
    s.max_k = std::max(s.max_k, lens_k[i]);
    s.q_offsets.push_back(s.q_offsets.back() + lens_q[i]);
    s.k_offsets.push_back(s.k_offsets.back() + lens_k[i]);
  }
  if (!padded) return s;
  std::vector<int64_t> q_pos, k_pos;
  std::vector<uint8_t> mask(size_t(s.num_segments * s.max_k), 0);
  for (int64_t seg = 0; seg < s.num_segments; ++seg) {
    for (int64_t j = 0; j < lens_q[size_t(seg)]; ++j) q_pos.push_back(seg * s.max_q + j);
    const int64_t nk = lens_k[size_t(seg)];
    for (int64_t j = 0; j < nk; ++j) k_pos.push_back(seg * s.max_k + j);
    if (nk > 0)
      for (int64_t j = nk; j < s.max_k; ++j) mask[size_t(seg * s.max_k + j)] = 1;
  }
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  s.q_pos = torch::tensor(q_pos, i64).to(device);
  s.k_pos = torch::tensor(k_pos, i64).to(device);
  s.key_mask = torch::from_blob(mask.data(), {s.num_segments, 1, 1, s.max_k}, torch::kUInt8)
                   .to(torch::kBool)
                   .to(device);
  return s;
}
}  // namespace

VarlenSegments VarlenSegments::from_lengths(const std::vector<int64_t>& lens_q, const std::vector<int64_t>& lens_k,
                                            const torch::Device& device) {
  return make_segments(lens_q, lens_k, device, !device.is_cpu());  // the CPU kernel needs no padded layout
}

torch::Tensor padded_varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const VarlenSegments& seg_in, double dropout, bool training) {
  VarlenSegments padded_seg;
  if (!seg_in.padded()) {  // made on the CPU for a test: build the padded layout from the offsets
    std::vector<int64_t> lq, lk;
    for (int64_t s = 0; s < seg_in.num_segments; ++s) {
      lq.push_back(seg_in.q_offsets[size_t(s) + 1] - seg_in.q_offsets[size_t(s)]);
      lk.push_back(seg_in.k_offsets[size_t(s) + 1] - seg_in.k_offsets[size_t(s)]);
    }
    padded_seg = make_segments(lq, lk, q.device(), true);
  }
  const VarlenSegments& seg = seg_in.padded() ? seg_in : padded_seg;
  const torch::Tensor q_pos = seg.q_pos.to(q.device()), k_pos = seg.k_pos.to(q.device());
  const torch::Tensor key_mask = seg.key_mask.to(q.device());
  const int64_t H = q.size(1), dh = q.size(2), S = seg.num_segments;
  TORCH_CHECK(q.size(0) == q_pos.size(0) && k.size(0) == k_pos.size(0),
              "varlen attention: rows do not match the segment lengths");
  const auto pad = [&](const torch::Tensor& x, const torch::Tensor& pos, int64_t len) {
    return torch::zeros({S * len, x.size(1), x.size(2)}, x.options())
        .index_copy(0, pos, x)
        .view({S, len, x.size(1), x.size(2)})
        .transpose(1, 2);  // [S, H, len, dh]
  };
  const auto attend = q.device().is_cpu() ? softmax_attend : device_attend;
  const torch::Tensor out = attend(pad(q, q_pos, seg.max_q), pad(k, k_pos, seg.max_k), pad(v, k_pos, seg.max_k),
                                   key_mask, dropout, training);
  return out.transpose(1, 2).reshape({S * seg.max_q, H, dh}).index_select(0, q_pos);
}

torch::Tensor plain_dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    double dropout, bool training) {
  const auto attend = q.device().is_cpu() ? softmax_attend : device_attend;
  return attend(q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2), {}, dropout, training)
      .transpose(-3, -2);
}

namespace {
// The norm of q and k, where the kernel does not take it over.
torch::Tensor normed(const torch::Tensor& t, const QkNorm& norm) {
  return norm.eps > 0 ? plain_layer_norm(t, norm.eps) : t;
}
}  // namespace

torch::Tensor varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const VarlenSegments& seg, double dropout, bool training, const QkNorm& norm) {
  TORCH_CHECK(q.size(0) == seg.q_offsets.back() && k.size(0) == seg.k_offsets.back(),
              "varlen attention: rows do not match the segment lengths");
  if (!kernel_runs_on(q)) return padded_varlen_attention(normed(q, norm), normed(k, norm), v, seg, dropout, training);
  if (norm.eps > 0 && !norm.lean)
    return varlen_attention(normed(q, norm), normed(k, norm), v, seg, dropout, training, QkNorm{});
  return AttentionFunction::apply(q, k, v, varlen_problems(seg, q.size(1), int64_t(q.element_size())),
                                  training ? dropout : 0.0, norm.eps);
}

torch::Tensor dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout,
                              bool training, const QkNorm& norm) {
  if (!kernel_runs_on(q) || q.dim() != 4 || k.size(1) != q.size(1))
    return plain_dense_attention(normed(q, norm), normed(k, norm), v, dropout, training);
  if (norm.eps > 0 && !norm.lean) return dense_attention(normed(q, norm), normed(k, norm), v, dropout, training, QkNorm{});
  const int64_t B = q.size(0), L = q.size(1), H = q.size(2), dh = q.size(3);
  const auto rows = [&](const torch::Tensor& t) { return t.reshape({B * L, H, dh}); };
  return AttentionFunction::apply(rows(q), rows(k), rows(v), dense_problems(B, L, H, int64_t(q.element_size())),
                                  training ? dropout : 0.0, norm.eps)
      .view({B, L, H, dh});
}

torch::Tensor block_local_attention(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v,
                                    int64_t block, const QkNorm& norm) {
  const bool inside = norm.eps > 0 && norm.lean && kernel_runs_on(q_in);  // the kernel norms q and k itself
  const torch::Tensor q = inside ? q_in : normed(q_in, norm), k = inside ? k_in : normed(k_in, norm);
  const QkNorm pass = inside ? norm : QkNorm{};
  // [B, L, H, dh]: the full blocks as B·nb sequences, the shorter last block on its own (no padding).
  const int64_t B = q.size(0), L = q.size(1), H = q.size(2), dh = q.size(3);
  const int64_t full = L / block, rest = L - full * block;
  // x cut into [the full blocks, the last block] (either may be missing);
  // split, whose backward concatenates, not narrow, whose backward zero-fills.
  std::vector<int64_t> sizes;
  if (full > 0) sizes.push_back(full * block);
  if (rest > 0) sizes.push_back(rest);
  const auto cut = [&](const torch::Tensor& x) {
    return sizes.size() == 1 ? std::vector<torch::Tensor>{x} : x.split_with_sizes(sizes, 1);
  };
  const std::vector<torch::Tensor> qs = cut(q), ks = cut(k), vs = cut(v);
  std::vector<torch::Tensor> parts;
  if (full > 0) {
    const auto blocks = [&](const torch::Tensor& x) { return x.reshape({B * full, block, H, dh}); };
    parts.push_back(dense_attention(blocks(qs[0]), blocks(ks[0]), blocks(vs[0]), 0.0, false, pass)
                        .view({B, full * block, H, dh}));
  }
  if (rest > 0) parts.push_back(dense_attention(qs.back(), ks.back(), vs.back(), 0.0, false, pass));
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 1);
}

}  // namespace wg
