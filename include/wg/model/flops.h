// The model's FLOPs per step, counted from the options and the batch's
// shapes (no LibTorch): every matrix product of the forward, 2·m·n·k each
// (linear layers, and attention's two products per head over each
// segment's real lengths, no padding), per recomputable piece. Elementwise
// work (norms, activations, softmax, biases) is not counted, as in the
// usual MFU convention (PaLM appendix B; Megatron's formula).
//
//   step = forward · 3 (backward: the gradients of input and weight, twice
//          the forward's products) + the forward of every recomputed piece
//          but its last product (attention's output projection, the MLP's
//          second layer), which a recomputation leaves out (saving.h), and,
//          on the CPU kernel (CoreKernel::Cpu), but half of each attention
//          core it runs there as one joint pass with its backward (the
//          scores computed once),
//          + what every lean piece runs again in backward (saving.h): its
//          attention cores where they are cheap (lean_reruns_core; on the
//          CPU kernel, where a joint pass runs them, their output product
//          only) and its AdaLayerNorms' first products; and an embed's
//          input product, made again in the backward of a lean block 0
//          attention after a lean input (piece.h; under autocast it is
//          kept instead, and the count is high by that product, a few
//          inputs wide: under 1 % of an embed block's)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "wg/model/model_options.h"
#include "wg/plan/piece_key.h"
#include "wg/plan/recompute_plan.h"

namespace wg {

// What the count reads of a batch (flop_shape in model_batch.h makes it).
struct FlopShape {
  struct Stream {
    std::string name;
    int64_t source_tokens = 0;                   // over all samples
    std::vector<std::vector<int64_t>> target_lens;  // [step][B·C] points per global cell (empty: no points)
  };
  int64_t num_samples = 0;  // B
  int64_t num_cells = 0;    // C
  int64_t num_tokens = 0;   // M: rows of the token buffer
  std::vector<int64_t> source_cell_lens;  // [B·C]
  std::vector<Stream> streams;            // in the model's decoder order
  int64_t num_target_steps = 0;
};

struct PieceFlops {
  PieceKey key;
  double forward = 0;       // the piece's forward, summed over its calls
  double last_product = 0;  // of which its last product, which a recomputation does not run again
  double lean_rerun = 0;    // of which what a lean run (Saving::Lean) runs again: cheap attention cores, AdaLayerNorms' first products
  // of which attention cores that a recomputation's rerun runs as one joint
  // pass with their backward (Saving::Rerun; the CPU kernel only): not
  // their forward, only their output product (half a core) more than a
  // backward alone
  double joint_core = 0;
  // lean_rerun runs only where the next piece is lean too (an embed's
  // input, which that piece makes again instead of keeping it)
  bool lean_rerun_with_next = false;
  double rerun() const { return forward - last_product - 0.5 * joint_core; }
};

struct ModelFlops {
  std::vector<PieceFlops> pieces;
  double outside_pieces = 0;  // forward FLOPs no plan covers (embed centroids)

  void add(const PieceKey& key, double flops, double last_product = 0, double lean_rerun = 0, double joint_core = 0);
  double forward() const;
  // What the plan's recomputed pieces and its lean pieces run again.
  double recomputed(const RecomputePlan& plan) const;
  double step(const RecomputePlan& plan) const { return 3.0 * forward() + recomputed(plan); }
};

// Where the attention cores run: on the CPU kernel (attention_core.h:
// float32 or float64 on the CPU), whose joint pass runs a core again with
// its backward in one pass; or elsewhere (CUDA, or autocast's lower
// precision), where a core run again runs its forward whole.
enum class CoreKernel { Cpu, Other };

ModelFlops model_flops(const ModelOptions& options, const FlopShape& shape, CoreKernel kernel);

}  // namespace wg
