// The attention cores (see header).
//
// The CPU kernel's invariants:
// - a "problem" is n sequences that attend among themselves, each of lq
//   query and lk key rows: varlen segments of one (lq, lk) shape batched
//   together (gathered by row index, no padding), or a chunk of dense
//   sequences; problems share no query, key or output row, so they run in
//   parallel and write their results without locks, and they are formed
//   without regard to the thread count: the result does not depend on it;
// - forward keeps q, k, v, the output and the log-sum-exp of each score row
//   ([Rq, H, 1]); backward recomputes the probabilities from them;
// - with dropout, problem i draws its keep-mask from a generator seeded
//   with (seed, i); seed is drawn once per call from the CPU generator, so
//   a recomputed piece (its generator states restored) draws the same masks;
// - a segment without keys gives 0 and no gradient; one without queries is
//   skipped.
#include "wg/model/attention_core.h"

#include "wg/model/norms.h"
#include "wg/util/blas.h"

#include <ATen/CPUGeneratorImpl.h>
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

// A problem: n sequences of lq query and lk key rows, the rows of
// [R, H, dh] tensors given by index (sequence-major). Varlen segments of
// the same (lq, lk) are batched into one problem (no padding); dense
// sequences are taken in chunks. Problems are formed without regard to the
// thread count, so dropout's masks (per problem) are too.
struct Problem {
  int64_t n = 0, lq = 0, lk = 0;
  torch::Tensor q_rows, k_rows;  // [n·lq], [n·lk] int64
};

struct Problems : torch::CustomClassHolder {
  std::vector<Problem> list;
};

// At most 8 MiB of scores per problem, and a group cut into about 8
// problems (at least 16 sequences each) for the threads to share.
int64_t chunk_size(int64_t n, int64_t H, int64_t lq, int64_t lk, int64_t element_size) {
  const int64_t by_memory = std::max<int64_t>(1, (int64_t(8) << 20) / std::max<int64_t>(1, H * lq * lk * element_size));
  return std::max<int64_t>(1, std::min(by_memory, std::max<int64_t>(16, (n + 7) / 8)));
}

torch::Tensor index_tensor(const std::vector<int64_t>& rows) {
  return torch::tensor(rows, torch::TensorOptions().dtype(torch::kInt64));
}

c10::intrusive_ptr<Problems> varlen_problems(const VarlenSegments& seg, int64_t H, int64_t element_size) {
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> groups;  // (lq, lk) -> segments, in order
  for (int64_t s = 0; s < seg.num_segments; ++s) {
    const int64_t lq = seg.q_offsets[size_t(s) + 1] - seg.q_offsets[size_t(s)];
    const int64_t lk = seg.k_offsets[size_t(s) + 1] - seg.k_offsets[size_t(s)];
    if (lq > 0 && lk > 0) groups[{lq, lk}].push_back(s);  // no keys: the output stays 0
  }
  auto out = c10::make_intrusive<Problems>();
  for (const auto& [shape, segments] : groups) {
    const auto [lq, lk] = shape;
    const int64_t chunk = chunk_size(int64_t(segments.size()), H, lq, lk, element_size);
    for (size_t first = 0; first < segments.size(); first += size_t(chunk)) {
      const size_t last = std::min(segments.size(), first + size_t(chunk));
      std::vector<int64_t> q_rows, k_rows;
      for (size_t i = first; i < last; ++i) {
        const int64_t s = segments[i];
        for (int64_t j = 0; j < lq; ++j) q_rows.push_back(seg.q_offsets[size_t(s)] + j);
        for (int64_t j = 0; j < lk; ++j) k_rows.push_back(seg.k_offsets[size_t(s)] + j);
      }
      out->list.push_back({int64_t(last - first), lq, lk, index_tensor(q_rows), index_tensor(k_rows)});
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
    const int64_t n = std::min(chunk, B - b);
    const torch::Tensor rows = torch::arange(b * L, (b + n) * L, torch::TensorOptions().dtype(torch::kInt64));
    out->list.push_back({n, L, L, rows, rows});
  }
  return out;
}

// Rows [n·l, H, dh] of a problem -> [n·H, l, dh], and back.
torch::Tensor gather(const torch::Tensor& t, const torch::Tensor& rows, int64_t n, int64_t l) {
  const int64_t H = t.size(1), dh = t.size(2);
  return t.index_select(0, rows).view({n, l, H, dh}).permute({0, 2, 1, 3}).reshape({n * H, l, dh});
}
void scatter(torch::Tensor& into, const torch::Tensor& rows, const torch::Tensor& part, int64_t n, int64_t l) {
  const int64_t H = into.size(1), dh = into.size(2);
  into.index_copy_(0, rows, part.view({n, H, l, dh}).permute({0, 2, 1, 3}).reshape({n * l, H, dh}));
}

// t [R, H, dh] detached, as the kernel reads it: rows may be strided (q, k
// and v cut from one fused projection), each row's [H, dh] contiguous.
torch::Tensor rows_of(const torch::Tensor& t) {
  const torch::Tensor d = t.detach();
  return d.stride(2) == 1 && d.stride(1) == d.size(2) ? d : d.contiguous();
}

// c = alpha · op(a) · op(b) per batch item ([batch, rows, cols],
// contiguous): straight through BLAS, as ATen's bmm pays several
// microseconds of bookkeeping per item (wg/util/blas.h); ATen where the
// process has no BLAS.
void small_mm(const torch::Tensor& a_in, bool trans_a, const torch::Tensor& b_in, bool trans_b, torch::Tensor& c,
              double alpha) {
  // gather's reshape is a strided view for a single sequence: BLAS reads dense batches.
  const torch::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2), k = trans_a ? a.size(1) : a.size(2);
  if (!blas_available()) {
    c.copy_(torch::bmm(trans_a ? a.transpose(1, 2) : a, trans_b ? b.transpose(1, 2) : b).mul_(alpha));
    return;
  }
  // Seen by LibTorch's profiler as the bmm it is (its FLOP count; Flops.* check ours against it).
  RECORD_FUNCTION("aten::bmm", std::vector<c10::IValue>({trans_a ? a.transpose(1, 2) : a, trans_b ? b.transpose(1, 2) : b}));
  if (c.scalar_type() == torch::kFloat)
    batched_gemm(trans_a, trans_b, batch, m, n, k, float(alpha), a.data_ptr<float>(), b.data_ptr<float>(), 0.0f,
                 c.data_ptr<float>());
  else
    batched_gemm(trans_a, trans_b, batch, m, n, k, alpha, a.data_ptr<double>(), b.data_ptr<double>(), 0.0,
                 c.data_ptr<double>());
}

torch::Tensor empty3(const torch::Tensor& like, int64_t batch, int64_t rows, int64_t cols) {
  return torch::empty({batch, rows, cols}, like.options());
}

uint64_t problem_seed(uint64_t seed, int64_t i) { return seed ^ (uint64_t(i + 1) * 0x9E3779B97F4A7C15ull); }

// Keep-mask of problem i, scaled by 1 / (1 - p).
torch::Tensor dropout_mask(uint64_t seed, int64_t i, const torch::Tensor& like, double p) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(problem_seed(seed, i));
  return torch::empty_like(like).bernoulli_(1.0 - p, gen).div_(1.0 - p);
}

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

// q, k, v [R, H, dh] rows; the problems say which rows attend to which.
struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in, const torch::Tensor& k_in,
                               const torch::Tensor& v_in, const c10::intrusive_ptr<Problems>& problems,
                               double dropout, double qk_norm_eps) {
    const bool norm = qk_norm_eps > 0;
    const torch::Tensor q = norm ? plain_layer_norm(q_in.detach(), qk_norm_eps) : rows_of(q_in);
    const torch::Tensor k = norm ? plain_layer_norm(k_in.detach(), qk_norm_eps) : rows_of(k_in);
    const torch::Tensor v = rows_of(v_in);
    const double scale = 1.0 / std::sqrt(double(q.size(-1)));
    torch::Tensor out = torch::zeros_like(q);
    torch::Tensor lse = torch::full({q.size(0), q.size(1), 1}, kNegInf, q.options());  // [Rq, H, 1]
    const uint64_t seed = dropout > 0 ? uint64_t(torch::empty({1}, torch::kLong).random_().item<int64_t>()) : 0;
    const std::vector<Problem>& list = problems->list;
    for_each_problem(int64_t(list.size()), [&](int64_t i) {
      const Problem& pr = list[size_t(i)];
      const torch::Tensor Q = gather(q, pr.q_rows, pr.n, pr.lq), K = gather(k, pr.k_rows, pr.n, pr.lk),
                          V = gather(v, pr.k_rows, pr.n, pr.lk);
      const int64_t nH = Q.size(0);
      torch::Tensor p = empty3(Q, nH, pr.lq, pr.lk);
      small_mm(Q, false, K, true, p, scale);  // the scores [nH, lq, lk]
      const torch::Tensor row_max = std::get<0>(p.max(-1, true));
      p.sub_(row_max).exp_();
      const torch::Tensor row_sum = p.sum(-1, true);
      const torch::Tensor row_lse = row_sum.log().add_(row_max);  // [nH, lq, 1]
      p.div_(row_sum);
      if (dropout > 0) p.mul_(dropout_mask(seed, i, p, dropout));
      torch::Tensor o = empty3(Q, nH, pr.lq, Q.size(2));
      small_mm(p, false, V, false, o, 1.0);
      scatter(out, pr.q_rows, o, pr.n, pr.lq);
      scatter(lse, pr.q_rows, row_lse, pr.n, pr.lq);
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
    const double scale = 1.0 / std::sqrt(double(q.size(-1)));
    const torch::Tensor d_out = grads[0].detach().contiguous();
    torch::Tensor dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
    const std::vector<Problem>& list = problems->list;
    for_each_problem(int64_t(list.size()), [&](int64_t i) {
      const Problem& pr = list[size_t(i)];
      const torch::Tensor Q = gather(q, pr.q_rows, pr.n, pr.lq), K = gather(k, pr.k_rows, pr.n, pr.lk),
                          V = gather(v, pr.k_rows, pr.n, pr.lk);
      const torch::Tensor dO = gather(d_out, pr.q_rows, pr.n, pr.lq), O = gather(out, pr.q_rows, pr.n, pr.lq);
      const torch::Tensor row_lse = gather(lse, pr.q_rows, pr.n, pr.lq);  // [nH, lq, 1]
      const int64_t nH = Q.size(0), dh = Q.size(2);
      torch::Tensor p = empty3(Q, nH, pr.lq, pr.lk);
      small_mm(Q, false, K, true, p, scale);
      p.sub_(row_lse).exp_();  // the probabilities again [nH, lq, lk]
      torch::Tensor mask, p_kept = p;
      if (dropout > 0) {
        mask = dropout_mask(seed, i, p, dropout);
        p_kept = p * mask;
      }
      torch::Tensor dV = empty3(Q, nH, pr.lk, dh);
      small_mm(p_kept, true, dO, false, dV, 1.0);
      scatter(dv, pr.k_rows, dV, pr.n, pr.lk);
      torch::Tensor ds = empty3(Q, nH, pr.lq, pr.lk);
      small_mm(dO, false, V, true, ds, 1.0);  // dP
      if (dropout > 0) ds.mul_(mask);
      const torch::Tensor row_dot = (dO * O).sum(-1, true);  // [nH, lq, 1]
      ds.sub_(row_dot).mul_(p).mul_(scale);
      torch::Tensor dQ = empty3(Q, nH, pr.lq, dh), dK = empty3(Q, nH, pr.lk, dh);
      small_mm(ds, false, K, false, dQ, 1.0);
      small_mm(ds, true, Q, false, dK, 1.0);
      scatter(dq, pr.q_rows, dQ, pr.n, pr.lq);
      scatter(dk, pr.k_rows, dK, pr.n, pr.lk);
    });
    if (qk_norm_eps > 0) {  // back through the norms
      dq = plain_layer_norm_backward(dq, saved[0], q_norm);
      dk = plain_layer_norm_backward(dk, saved[1], k_norm);
    }
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

bool kernel_runs_on(const torch::Tensor& q) {
  return q.device().is_cpu() && (q.scalar_type() == torch::kFloat || q.scalar_type() == torch::kDouble);
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
  std::vector<torch::Tensor> parts;
  if (full > 0) {
    const auto blocks = [&](const torch::Tensor& x) { return x.narrow(1, 0, full * block).reshape({B * full, block, H, dh}); };
    parts.push_back(dense_attention(blocks(q), blocks(k), blocks(v), 0.0, false, pass).view({B, full * block, H, dh}));
  }
  if (rest > 0) {
    const auto last = [&](const torch::Tensor& x) { return x.narrow(1, full * block, rest); };
    parts.push_back(dense_attention(last(q), last(k), last(v), 0.0, false, pass));
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 1);
}

}  // namespace wg
