// Work seen by LibTorch's profiler as one batched product: the attention
// kernel's per-head products and the read-out's grouped product on rows
// run their own loops, and record themselves as the aten::bmm they stand
// for ([batch, m, k] · [batch, k, n], shapes only, on the meta device), so
// the profiler counts their FLOPs as it counts ATen's (Flops.* check the
// model's count against the profiler's).
#pragma once

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace wg {

template <typename F>
void recorded_as_bmm(int64_t batch, int64_t m, int64_t k, int64_t n, const F& run) {
  const auto meta = torch::TensorOptions().device(torch::kMeta);
  RECORD_FUNCTION("aten::bmm",
                  std::vector<c10::IValue>({torch::empty({batch, m, k}, meta), torch::empty({batch, k, n}, meta)}));
  run();
}

}  // namespace wg
