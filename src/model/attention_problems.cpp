// How the CPU attention kernel's calls are cut into problems (see
// attention_kernel.h): varlen segments grouped by shape, range of
// segments by range; dense sequences and block-local blocks in chunks.
// Formed without regard to the thread count.
#include "attention_kernel.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace wg::kernel {

namespace {

// At most 8 MiB of scores per problem, and a group cut into about 8
// problems (at least 16 sequences each) for the threads to share.
int64_t chunk_size(int64_t n, int64_t H, int64_t lq, int64_t lk, int64_t element_size) {
  const int64_t by_memory = std::max<int64_t>(1, (int64_t(8) << 20) / std::max<int64_t>(1, H * lq * lk * element_size));
  return std::max<int64_t>(1, std::min(by_memory, std::max<int64_t>(16, (n + 7) / 8)));
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
      const int64_t lq = seg.q_offsets[size_t(s) + 1] - seg.q_offsets[size_t(s)],
                    lk = key_offset(s + 1) - key_offset(s);
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

}  // namespace wg::kernel
