// The name of one recomputable piece of the model: its section, stream (for
// per-stream sections), block and kind. The one spelling of a piece, in
// plan tables, logs and metric labels, is its key string:
//   "embed.ERA5/input", "embed.ERA5/block0.attn", "latent/block1.mlp", "pred/head"
// (section label, '/', piece label). parse() is the one parser of it.
#pragma once

#include <optional>
#include <string>

namespace wg {

enum class PieceKind {
  Input,      // a section's input layers (embed: Linear + positional encoding)
  Attention,       // a block's self-attention layer (with its norm and residual)
  CrossAttention,  // a block's cross-attention layer (queries attend to another sequence)
  Mlp,        // a block's MLP layer
  Readout,    // a section's output layers (embed: per-channel read-out)
  Head,       // a prediction head
};

const char* piece_kind_name(PieceKind kind);  // "input", "attn", "cross", "mlp", "readout", "head"

struct PieceKey {
  std::string section;  // "embed", "ae_local", ..., "pred" (wg/config/recompute_sections.h)
  std::string stream;   // per-stream sections: the stream; else ""
  int block = -1;       // the block of a block piece (Attention, Mlp); -1 otherwise
  PieceKind kind = PieceKind::Input;

  static PieceKey io(std::string section, std::string stream, PieceKind kind);
  static PieceKey in_block(std::string section, std::string stream, int block, PieceKind kind);

  bool in_a_block() const { return block >= 0; }
  bool is_attention() const { return kind == PieceKind::Attention || kind == PieceKind::CrossAttention; }

  std::string section_label() const;  // "embed.ERA5", "ae_global"
  std::string piece_label() const;    // "block0.attn", "input", "head"
  std::string str() const;            // section_label() + "/" + piece_label()

  // The inverse of str(); nothing for text that is not a key.
  static std::optional<PieceKey> parse(const std::string& text);

  bool operator==(const PieceKey& o) const {
    return section == o.section && stream == o.stream && block == o.block && kind == o.kind;
  }
  bool operator!=(const PieceKey& o) const { return !(*this == o); }
  bool operator<(const PieceKey& o) const { return str() < o.str(); }
};

}  // namespace wg
