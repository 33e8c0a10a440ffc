// Piece keys and their one spelling (see header).
#include "wg/plan/piece_key.h"

#include <cstdlib>

namespace wg {

namespace {
constexpr PieceKind kKinds[] = {PieceKind::Input,   PieceKind::Attention, PieceKind::CrossAttention,
                                PieceKind::Mlp,     PieceKind::Readout,   PieceKind::Head};

bool block_kind(PieceKind k) {
  return k == PieceKind::Attention || k == PieceKind::CrossAttention || k == PieceKind::Mlp;
}
}  // namespace

const char* piece_kind_name(PieceKind kind) {
  switch (kind) {
    case PieceKind::Input: return "input";
    case PieceKind::Attention: return "attn";
    case PieceKind::CrossAttention: return "cross";
    case PieceKind::Mlp: return "mlp";
    case PieceKind::Readout: return "readout";
    case PieceKind::Head: return "head";
  }
  return "?";
}

PieceKey PieceKey::io(std::string section, std::string stream, PieceKind kind) {
  return {std::move(section), std::move(stream), -1, kind};
}

PieceKey PieceKey::in_block(std::string section, std::string stream, int block, PieceKind kind) {
  return {std::move(section), std::move(stream), block, kind};
}

std::string PieceKey::section_label() const { return stream.empty() ? section : section + "." + stream; }

std::string PieceKey::piece_label() const {
  const std::string kind_name = piece_kind_name(kind);
  return block >= 0 ? "block" + std::to_string(block) + "." + kind_name : kind_name;
}

std::string PieceKey::str() const { return section_label() + "/" + piece_label(); }

std::optional<PieceKey> PieceKey::parse(const std::string& text) {
  const auto slash = text.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == text.size()) return std::nullopt;
  const std::string head = text.substr(0, slash), piece = text.substr(slash + 1);
  PieceKey k;
  const auto dot = head.find('.');
  k.section = head.substr(0, dot);
  if (dot != std::string::npos) {
    k.stream = head.substr(dot + 1);
    if (k.stream.empty()) return std::nullopt;
  }
  std::string kind = piece;
  if (piece.rfind("block", 0) == 0) {
    const auto kdot = piece.find('.');
    const std::string number = piece.substr(5, kdot == std::string::npos ? std::string::npos : kdot - 5);
    if (kdot == std::string::npos || number.empty() || number.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    k.block = std::atoi(number.c_str());
    kind = piece.substr(kdot + 1);
  }
  for (PieceKind candidate : kKinds)
    if (kind == piece_kind_name(candidate)) {
      if (block_kind(candidate) != (k.block >= 0)) return std::nullopt;
      k.kind = candidate;
      return k;
    }
  return std::nullopt;
}

}  // namespace wg
