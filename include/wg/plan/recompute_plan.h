// The recomputation plan: for every piece of the model, whether its
// activations are recomputed in backward instead of kept. Decided before
// the model runs (wg/plan/rank_plan.h, auto_plan.h), changed only between
// steps (the out-of-memory fallback, oom_policy.h); the model only reads it,
// at one call site per section (wg/model/piece.h).
//
// Which pieces exist is the model's structure for a configuration
// (model_pieces); how the sections' settings select them is resolve_plan:
//   none       nothing
//   full       every piece of the section
//   selective  every block piece lean: its projections' inputs and outputs
//              kept, its norms, activations and attention probabilities
//              recomputed in backward (no product is run again)
//   every_n    blocks 0, n, 2n, ... (all their pieces)
//   blocks     these blocks (all their pieces), on top of the mode
//   pieces     these pieces ("block1.attn": the plan table's labels, in
//              every stream of a per-stream section), on top of the mode
// A section without block pieces counts as one block, block 0, made of its
// pieces. In a section with blocks, the pieces outside them (an embed's
// input and read-out, a decoder's coordinate embedding and head) are
// recomputed by `full` only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wg/config/config.h"
#include "wg/plan/piece_key.h"

namespace wg {

// What a piece keeps for backward: all its activations (Keep); only the
// inputs and outputs of its matrix products, with norms, activations and
// attention probabilities recomputed from them in backward (Lean); or only
// its input, the whole piece run again in backward (Recompute).
enum class PieceMode : uint8_t { Keep, Lean, Recompute };
const char* piece_mode_name(PieceMode mode);  // "no", "lean", "yes" (the plan table's words)

class RecomputePlan {
 public:
  RecomputePlan() = default;
  // Every piece kept (nothing recomputed).
  explicit RecomputePlan(std::vector<PieceKey> pieces);

  const std::vector<PieceKey>& pieces() const { return pieces_; }  // forward order
  size_t size() const { return pieces_.size(); }
  // Whether piece i is run again in backward (PieceMode::Recompute).
  bool recomputed(size_t i) const { return mode_.at(i) == PieceMode::Recompute; }
  PieceMode mode(size_t i) const { return mode_.at(i); }
  // true: Recompute; false: Keep.
  void set(size_t i, bool recompute) { mode_.at(i) = recompute ? PieceMode::Recompute : PieceMode::Keep; }
  void set_mode(size_t i, PieceMode mode) { mode_.at(i) = mode; }
  // By key; throw std::out_of_range naming the key when the plan has no such piece.
  bool get(const PieceKey& key) const;
  PieceMode mode(const PieceKey& key) const;
  void set(const PieceKey& key, bool recompute);
  void set_mode(const PieceKey& key, PieceMode mode);

  int pieces_total() const { return int(pieces_.size()); }
  int pieces_recomputed() const;
  int pieces_lean() const;
  // One row per piece ("section  piece  recompute": yes, lean or no), then a count. Logged at start.
  std::string table() const;
  // Recomputed / all pieces per section, e.g. "embed 7/7 latent 0/4 pred 0/1",
  // with the lean ones where there are any ("ae_local 0/4 (4 lean)").
  std::string summary() const;

  bool operator==(const RecomputePlan& o) const { return pieces_ == o.pieces_ && mode_ == o.mode_; }

 private:
  size_t index_of(const PieceKey& key) const;
  std::vector<PieceKey> pieces_;
  std::vector<PieceMode> mode_;
};

// The model's pieces for `config`, in forward order: per stream with source
// tokens the embed transformer (input, per block attn and mlp, readout);
// the local blocks; the adapter (block0.cross, block0.mlp, block1.cross);
// the aggregation, global and forecast blocks; per stream the decoder
// (input, per layer cross, attn, mlp, head). WeatherModel builds exactly
// these (a test checks).
std::vector<PieceKey> model_pieces(const Config& config);

// Whether a piece can run lean (what `selective` runs lean, and the
// automatic planner's third choice): every block piece, an embed's
// read-out and an embed's input.
bool runs_lean(const PieceKey& piece);

// Throws std::invalid_argument naming where it was set when a section's
// `pieces` list names a label that none of that section's pieces among
// `pieces` (the model's) has.
void check_piece_lists(const std::vector<PieceKey>& pieces, const RecomputeConfig& sections);

// The plan the section settings select (see above). Throws
// std::invalid_argument naming the key when a block index is out of range,
// and as check_piece_lists does.
RecomputePlan resolve_plan(const std::vector<PieceKey>& pieces, const RecomputeConfig& sections);
inline RecomputePlan resolve_plan(const Config& config) {
  return resolve_plan(model_pieces(config), config.gradient_checkpointing);
}

}  // namespace wg
