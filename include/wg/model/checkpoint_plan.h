// The checkpoint plan: which pieces of the network are recomputed in
// backward instead of keeping their activations. Decided once, before the
// model is built, from the configuration (and later per rank); the model
// only reads it. One bool per piece.
//
// Pieces per section:
//   embed  (per stream): input (embed Linear + positional encoding),
//                        block i attention, block i MLP, read-out
//   latent:              block i attention, block i MLP
//   pred   (per stream): head
#pragma once

#include <string>
#include <vector>

#include "wg/config/config.h"

namespace wg {

struct BlockPlan {
  bool attn = false;
  bool mlp = false;
};

struct EmbedPlan {
  std::string stream;
  bool input = false;
  std::vector<BlockPlan> blocks;
  bool readout = false;
};

struct LatentPlan {
  std::vector<BlockPlan> blocks;
};

struct PredPlan {
  bool head = false;
};

struct CheckpointPlan {
  std::vector<EmbedPlan> embed;  // one per stream, in config order
  LatentPlan latent;
  PredPlan pred;

  const EmbedPlan& embed_for(const std::string& stream) const;

  // Pieces by key "section/piece", as in the table: "embed.ERA5/block0.attn",
  // "latent/block1.mlp", "pred/head". keys() is in table order.
  static std::string key(const std::string& section, const std::string& piece);
  std::vector<std::string> keys() const;
  bool get(const std::string& key) const;  // throws std::out_of_range
  void set(const std::string& key, bool on);
  int pieces_total() const;
  int pieces_recomputed() const;
  // One row per piece: "section  piece  recompute". Logged at start.
  std::string table() const;
  // Compact one-line summary, e.g. "embed 7/7 latent 0/4 pred 0/1".
  std::string summary() const;
};

// Resolves the section settings into one bool per piece. Throws
// std::invalid_argument naming the key when a block index is out of range.
CheckpointPlan resolve_checkpoint_plan(const Config& config);

// For one section of `num_blocks` blocks; `has_io` adds the section's
// non-block pieces (embed input and read-out, pred head).
struct SectionPieces {
  bool io = false;  // non-block pieces
  std::vector<BlockPlan> blocks;
};
SectionPieces resolve_section(const SectionCheckpointConfig& section, int num_blocks,
                              const std::string& section_name);

}  // namespace wg
