// The CPU attention kernel (see attention_kernel.h; the cores' entry
// points are in attention_core.cpp; how a call is cut into problems, in
// attention_problems.cpp; a problem's work tile by tile, in
// attention_tiles.h).
//
// Its invariants:
// - a "problem" is n sequences that attend among themselves, each of lq
//   query and lk key rows: varlen segments of one (lq, lk) shape batched
//   together (gathered by row index, no padding; with gathered keys, only
//   within one range of segments, below), or a chunk of dense
//   sequences; problems share no query, key or output row, so they run in
//   parallel and write their results without locks, and they are formed
//   without regard to the thread count: the result does not depend on it,
//   but where a call has a single problem, whose products BLAS may split
//   over the threads (for_each_problem);
// - q, k and v are column blocks ("slots") of row tensors ("sources", [R,
//   W]): the fused projections as the layers made them; every product
//   reads its operands and writes its result where they lie (BLAS, or
//   small_gemm for the problems small_products picks, with the row stride
//   as leading dimension): no rows gathered or scattered
//   (but cross-attention's keys and values given as rows kv_rows of kv:
//   gathered before the call), and outputs zero-filled only when some rows
//   lie in no problem; backward gives one gradient per source, each slot's
//   columns written in place;
// - the q/k norm (head_norm.h) runs inside each tile (TileQK): it reads q
//   and k in their slots into the tile's own buffers, and writes its
//   backward into their gradients' slots; nothing normed outlives a tile;
// - forward keeps the sources, the output and the log-sum-exp of each
//   score row ([Rq, H]); backward norms q and k again, recomputes the
//   probabilities from them, and each score row's Σ dO · O per tile (8
//   fixed lanes);
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
//   a backward or joint pass draws a tile's mask once and applies it to
//   each tensor it masks (TileMask: the same bits as drawing it each time);
// - a segment without keys gives 0 and no gradient; one without queries is
//   skipped.
#include "attention_kernel.h"
#include "attention_tiles.h"

#include "wg/model/dropout.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <tuple>
#include <utility>

namespace wg::kernel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

uint64_t problem_seed(uint64_t seed, int64_t i) { return seed ^ (uint64_t(i + 1) * 0x9E3779B97F4A7C15ull); }

// Runs fn(i) for problems [0, count) of a call of call_count problems: a
// call of one problem inline (its products may use every thread), more in
// parallel over the rank's threads, taken one at a time (cells differ in
// size), each worker marked as in a parallel region so the products inside
// stay on it. Decided by the call's count, not by how many of its problems
// run now: a gathered joint pass runs them range by range, and a problem
// alone in its range must see BLAS on one thread as it did in the forward
// (oneDNN on AVX2 splits a long reduction over 2 threads, which changes
// its bits). Needs this file compiled with OpenMP (CMakeLists.txt);
// without, it runs serially.
template <typename F>
void for_each_problem(int64_t count, size_t call_count, const F& fn) {
  const int threads = at::get_num_threads();
  if (call_count == 1 || threads == 1 || at::in_parallel_region()) {
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
  double dropout = 0, qk_norm_eps = 0;  // qk_norm_eps 0: no q/k norm
};

template <typename T>
Rows<T> slot_rows(const torch::Tensor& source, const Slot& s, int64_t dh) {
  return {source.data_ptr<T>() + s.col, source.stride(0), dh};
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
// being the call's problem first + i (its dropout seed): out [Rq, H, dh]
// and lse [Rq, H]; in backward d_out [Rq, H, dh] contiguous and the
// sources' gradients (through the q/k norm where it runs: TileQK).
void run_problems(Pass pass, const Call& c, const std::vector<Problem>& list, size_t first,
                  const std::vector<torch::Tensor>& sources, const torch::Tensor& out, const torch::Tensor& lse,
                  const torch::Tensor& d_out, const std::vector<torch::Tensor>& d_sources, uint64_t seed) {
  const torch::Tensor &qs = sources[c.q.src], &ks = sources[c.k.src], &vs = sources[c.v.src];
  const int64_t dh = c.dh;
  AT_DISPATCH_FLOATING_TYPES(qs.scalar_type(), "attention", [&] {
    using Rs = Rows<scalar_t>;
    const auto grad = [&](const Slot& s) {
      return pass == Pass::Forward ? Rs{nullptr, 0, dh} : slot_rows<scalar_t>(d_sources[s.src], s, dh);
    };
    const Operands<scalar_t> a{slot_rows<scalar_t>(qs, c.q, dh),
                               slot_rows<scalar_t>(ks, c.k, dh),
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
                               c.qk_norm_eps,
                               qs.options()};
    for_each_problem(int64_t(list.size()), c.problems->list.size(),
                     [&](int64_t i) { run_problem(pass, list[size_t(i)], a, problem_seed(seed, int64_t(first) + i)); });
  });
}

// What a forward (and a joint pass) starts from: the output [Rq, H, dh]
// and lse [Rq, H] (rows in no problem: 0, and an lse never read), and the
// dropout seed, drawn last from the CPU generator, so that a joint pass
// after the generators are restored draws the forward's seed.
struct Started {
  torch::Tensor out, lse;
  uint64_t seed = 0;
};
Started start(const Call& c, const std::vector<torch::Tensor>& sources) {
  Started r;
  const torch::Tensor& qs = sources[c.q.src];
  r.out = written_whole({qs.size(0), c.heads, c.dh}, qs.options(), c.problems->covers_all);
  r.lse = torch::empty({qs.size(0), c.heads}, qs.options());
  r.seed = c.dropout > 0 ? draw_dropout_seed() : 0;
  return r;
}

// Inputs: the sources ([R, W] rows, each column block of H·dh a slot);
// output [Rq, H, dh]. Keeps the sources, the output and each row's
// log-sum-exp (q and k are normed again in backward, tile by tile);
// backward returns one gradient per source, q, k and v written into
// their columns.
struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const c10::intrusive_ptr<Call>& call, at::TensorList sources) {
    const Call& c = *call;
    const std::vector<torch::Tensor> in(sources.begin(), sources.end());
    const Started r = start(c, in);
    run_problems(Pass::Forward, c, c.problems->list, 0, in, r.out, r.lse, {}, {}, r.seed);
    variable_list keep(sources.begin(), sources.end());
    keep.insert(keep.end(), {r.out, r.lse});
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
    const size_t n = saved.size() - 2;  // the sources
    const std::vector<torch::Tensor> sources(saved.begin(), saved.begin() + long(n));
    const torch::Tensor &out = saved[n], &lse = saved[n + 1];
    const std::vector<torch::Tensor> d_sources = source_grads(c, sources);
    run_problems(Pass::Backward, c, c.problems->list, 0, sources, out, lse, grads[0].detach().contiguous(), d_sources,
                 seed);
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
  run_problems(Pass::Joint, c, c.problems->list, 0, sources, r.out, r.lse, d_out.contiguous(), d_sources, r.seed);
  return {r.out, std::move(d_sources)};
}

// run_joint for a cross-attention whose keys and values are rows kv_rows
// of kv (q [Rq, H·dh], kv [Rkv, 2·H·dh]; slots q {0, 0}, k {1, 0}, v {1,
// H·dh}), the problems cut at ranges of segments: range by range, its rows
// gathered, its problems run with their seeds in the whole call, and the
// range's gradient summed into kv's rows in kv_rows' order (as
// index_select's backward sums, one index_add_ after another). Returns the
// output and the gradients of q and kv.
std::pair<torch::Tensor, std::vector<torch::Tensor>> run_joint_gathered(const Call& c, const torch::Tensor& q,
                                                                        const torch::Tensor& kv,
                                                                        const torch::Tensor& kv_rows,
                                                                        const torch::Tensor& d_out) {
  const std::vector<KeyRange>& ranges = c.problems->ranges;
  TORCH_INTERNAL_ASSERT(ranges.empty() ? c.problems->list.empty() : ranges.back().end == c.problems->list.size(),
                        "gathered joint pass: the problems were not formed range by range");
  const Started r = start(c, {q, kv});
  const torch::Tensor d_o = d_out.contiguous();
  const torch::Tensor d_q = written_whole(q.sizes(), q.options(), c.problems->covers_all);
  const torch::Tensor d_kv = torch::zeros(kv.sizes(), kv.options());
  for (const KeyRange& range : ranges) {
    const torch::Tensor ids = kv_rows.slice(0, range.k_begin, range.k_end);  // the range's rows of kv
    const torch::Tensor kv_range = kv.index_select(0, ids);
    const torch::Tensor d_range = written_whole(kv_range.sizes(), kv_range.options(), c.problems->covers_all);
    std::vector<Problem> list(c.problems->list.begin() + long(range.first), c.problems->list.begin() + long(range.end));
    for (Problem& pr : list)
      for (int64_t& k : pr.k_first) {
        k -= range.k_begin;  // rows of kv_range
        TORCH_INTERNAL_ASSERT(k >= 0 && k + pr.lk <= kv_range.size(0),
                              "gathered joint pass: a problem spans two ranges");
      }
    run_problems(Pass::Joint, c, list, range.first, {q, kv_range}, r.out, r.lse, d_o, {d_q, d_range}, r.seed);
    d_kv.index_add_(0, ids, d_range);
  }
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
