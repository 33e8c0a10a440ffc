// The CPU attention kernel (attention_kernel.cpp, where its invariants
// are listed): the problems a call is cut into, and the kernel's calls,
// under autograd and as a joint pass. The cores' entry points
// (attention_core.cpp) check shapes, choose the kernel or the reference,
// and ask for the call's problems (the builders below); nothing else
// includes this header.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "wg/model/attention_core.h"

namespace wg::kernel {

// A problem: sequences of one shape, lq query and lk key rows each, in
// [R, H, dh] row tensors: sequence j's query rows start at row q_first[j],
// its key rows at k_first[j]. Varlen segments of the same (lq, lk) are
// batched into one problem (no padding), within a range of segments
// (KeyRange); dense sequences are taken in chunks. Problems are formed
// without regard to the thread count, so dropout's masks (per problem)
// are too.
struct Problem {
  int64_t lq = 0, lk = 0;
  std::vector<int64_t> q_first, k_first;
  int64_t n() const { return int64_t(q_first.size()); }
};

// Problems [first, end) of a list, whose key rows all lie in [k_begin,
// k_end) (positions in the segments' key rows: with gathered keys, in
// kv_rows): varlen problems formed range of segments by range (none spans
// two), so that a joint pass over gathered keys can gather one range at a
// time. One range of all segments unless the keys are gathered.
struct KeyRange {
  size_t first = 0, end = 0;
  int64_t k_begin = 0, k_end = 0;
};

// A call's problems, in the order their dropout seeds are numbered.
struct Problems : torch::CustomClassHolder {
  std::vector<Problem> list;
  std::vector<KeyRange> ranges;  // varlen: in order, covering the list; dense: none
  // Every query row and every key row lies in a sequence that has both, so
  // the products write every row of the outputs and gradients (no zero-fill).
  bool covers_all = true;
};

// A cross-attention's keys and values gathered (Projections::kv_rows) are
// cut into ranges of segments of about this many bytes of gathered rows
// (at least one segment a range), in every mode: a joint pass holds one
// range's rows and their gradient at once
// (varlen_attention_joint).
constexpr int64_t kGatherRangeBytes = int64_t(2) << 20;

// Segments of one shape batched into problems, range of segments by
// range: ranges of at most range_rows key rows (at least one segment
// each), or one range of all segments (range_rows 0).
c10::intrusive_ptr<Problems> varlen_problems(const VarlenSegments& seg, int64_t H, int64_t element_size,
                                             int64_t range_rows = 0);
// B sequences of L rows each ([B·L, H, dh]).
c10::intrusive_ptr<Problems> dense_problems(int64_t B, int64_t L, int64_t H, int64_t element_size);
// B sequences of L rows, each cut into blocks of `block` rows (the last may be shorter).
c10::intrusive_ptr<Problems> block_problems(int64_t B, int64_t L, int64_t block, int64_t H, int64_t element_size);

// The kernel runs on q's tensors: on the CPU, float32/float64, with a BLAS
// in the process (Debian's LibTorch links one).
bool runs_on(const torch::Tensor& q);

// The kernel under autograd: self-attention (one source of q, k and v
// side by side) or cross-attention (q; k and v side by side, gathered by
// kv_rows where given) -> [Rq, H, dh].
torch::Tensor attend(const Projections& p, c10::intrusive_ptr<Problems> problems, double dropout, const QkNorm& norm);
// Separate q, k, v [..., H, dh] -> [Rq, H, dh].
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     c10::intrusive_ptr<Problems> problems, double dropout, const QkNorm& norm);
// attend(p, ...)'s output and, for d_out, its backward at once, without a
// graph (attention_core.h's joint pass): the problems must be those the
// forward made.
CoreJoint attend_joint(const Projections& p, c10::intrusive_ptr<Problems> problems, double dropout, const QkNorm& norm,
                       const torch::Tensor& d_out);

}  // namespace wg::kernel
