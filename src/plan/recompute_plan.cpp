// The plan, the model's pieces and the resolution of section settings (see header).
#include "wg/plan/recompute_plan.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "wg/config/recompute_sections.h"

namespace wg {

// The pieces `selective` runs lean (model/saving.h): those whose products
// can keep only their inputs and outputs, running their norms and
// activations again in backward: every block piece, and an embed's
// read-out (its per-channel norms before one grouped product); and an
// embed's input, whose output (as big as a block's input, from a product
// over a few inputs) a lean block 0 attention makes again instead of
// keeping it (model/piece.h). A decoder's coordinate embedding and head
// have no norm or activation before a product to leave out.
bool runs_lean(const PieceKey& p) {
  return p.in_a_block() || p.kind == PieceKind::Readout || (p.section == "embed" && p.kind == PieceKind::Input);
}

const char* piece_mode_name(PieceMode mode) {
  switch (mode) {
    case PieceMode::Keep: return "no";
    case PieceMode::Lean: return "lean";
    case PieceMode::Recompute: return "yes";
  }
  return "?";
}

RecomputePlan::RecomputePlan(std::vector<PieceKey> pieces)
    : pieces_(std::move(pieces)), mode_(pieces_.size(), PieceMode::Keep) {}

size_t RecomputePlan::index_of(const PieceKey& key) const {
  for (size_t i = 0; i < pieces_.size(); ++i)
    if (pieces_[i] == key) return i;
  throw std::out_of_range("the recomputation plan has no piece '" + key.str() + "'");
}

bool RecomputePlan::get(const PieceKey& key) const { return recomputed(index_of(key)); }
PieceMode RecomputePlan::mode(const PieceKey& key) const { return mode_[index_of(key)]; }
void RecomputePlan::set(const PieceKey& key, bool recompute) { set(index_of(key), recompute); }
void RecomputePlan::set_mode(const PieceKey& key, PieceMode mode) { mode_[index_of(key)] = mode; }

int RecomputePlan::pieces_recomputed() const { return int(std::count(mode_.begin(), mode_.end(), PieceMode::Recompute)); }
int RecomputePlan::pieces_lean() const { return int(std::count(mode_.begin(), mode_.end(), PieceMode::Lean)); }

std::string RecomputePlan::table() const {
  std::ostringstream os;
  os << "section        piece          recompute\n";
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const std::string section = pieces_[i].section_label(), piece = pieces_[i].piece_label();
    os << section << std::string(section.size() < 15 ? 15 - section.size() : 0, ' ') << piece
       << std::string(piece.size() < 15 ? 15 - piece.size() : 0, ' ') << piece_mode_name(mode_[i]) << '\n';
  }
  os << "recomputed " << pieces_recomputed() << " of " << pieces_total() << " pieces";
  if (pieces_lean() > 0) os << ", " << pieces_lean() << " lean";
  return os.str();
}

std::string RecomputePlan::summary() const {
  std::vector<std::string> order;
  struct Count {
    int recomputed = 0, lean = 0, all = 0;
  };
  std::map<std::string, Count> counts;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const std::string& s = pieces_[i].section;
    if (!counts.count(s)) order.push_back(s);
    counts[s].recomputed += recomputed(i);
    counts[s].lean += mode_[i] == PieceMode::Lean;
    counts[s].all += 1;
  }
  std::ostringstream os;
  for (const auto& s : order) {
    const Count& c = counts[s];
    os << (&s == &order.front() ? "" : " ") << s << " " << c.recomputed << "/" << c.all;
    if (c.lean > 0) os << " (" << c.lean << " lean)";
  }
  return os.str();
}

std::vector<PieceKey> model_pieces(const Config& c) {
  std::vector<PieceKey> out;
  const auto blocks = [&out](const std::string& section, int n) {
    for (int b = 0; b < n; ++b) {
      out.push_back(PieceKey::in_block(section, "", b, PieceKind::Attention));
      out.push_back(PieceKey::in_block(section, "", b, PieceKind::Mlp));
    }
  };
  for (const auto& s : c.streams) {
    if (s.diagnostic) continue;  // no embed transformer
    out.push_back(PieceKey::io("embed", s.name, PieceKind::Input));
    for (int b = 0; b < s.embed.num_blocks; ++b) {
      out.push_back(PieceKey::in_block("embed", s.name, b, PieceKind::Attention));
      out.push_back(PieceKey::in_block("embed", s.name, b, PieceKind::Mlp));
    }
    out.push_back(PieceKey::io("embed", s.name, PieceKind::Readout));
  }
  blocks("ae_local", c.ae_local_num_blocks);
  out.push_back(PieceKey::in_block("ae_adapter", "", 0, PieceKind::CrossAttention));
  out.push_back(PieceKey::in_block("ae_adapter", "", 0, PieceKind::Mlp));
  out.push_back(PieceKey::in_block("ae_adapter", "", 1, PieceKind::CrossAttention));
  blocks("ae_aggregation", c.ae_aggregation_num_blocks);
  blocks("ae_global", c.ae_global_num_blocks);
  blocks("forecast", c.forecast_policy.empty() ? 0 : c.fe_num_blocks);
  for (const auto& s : c.streams) {
    out.push_back(PieceKey::io("pred", s.name, PieceKind::Input));
    for (int l = 0; l < s.target_readout.num_layers; ++l) {
      out.push_back(PieceKey::in_block("pred", s.name, l, PieceKind::CrossAttention));
      if (c.pred_self_attention) out.push_back(PieceKey::in_block("pred", s.name, l, PieceKind::Attention));
      out.push_back(PieceKey::in_block("pred", s.name, l, PieceKind::Mlp));
    }
    out.push_back(PieceKey::io("pred", s.name, PieceKind::Head));
  }
  return out;
}

void check_piece_lists(const std::vector<PieceKey>& pieces, const RecomputeConfig& sections) {
  // Piece labels per section (over all its instances), in forward order.
  std::map<std::string, std::vector<std::string>> labels;
  for (const auto& p : pieces) {
    std::vector<std::string>& l = labels[p.section];
    if (std::find(l.begin(), l.end(), p.piece_label()) == l.end()) l.push_back(p.piece_label());
  }
  for (const auto& sec : recompute_sections()) {
    const SectionRecompute& sc = sections.*sec.field;
    const std::vector<std::string>& have = labels[sec.name];
    for (const auto& label : sc.pieces) {
      if (std::find(have.begin(), have.end(), label) != have.end()) continue;
      std::string list;
      for (const auto& h : have) list += (list.empty() ? "" : ", ") + h;
      throw std::invalid_argument(
          sc.pieces_origin.str() + ": " + sec.name + ".pieces names '" + label + "', " +
          (have.empty() ? "but this model has no " + sec.name + " pieces"
                        : "which is not a piece of the " + sec.name + " section (its pieces: " + list + ")"));
    }
  }
}

RecomputePlan resolve_plan(const std::vector<PieceKey>& pieces, const RecomputeConfig& sections) {
  // Blocks per section (over all its instances); a section without block pieces is one block.
  std::map<std::string, int> blocks;
  for (const auto& p : pieces) blocks[p.section] = std::max(blocks[p.section], p.block + 1);
  for (const auto& [name, count] : blocks) {
    const RecomputeSectionInfo* info = find_recompute_section(name);
    if (!info) throw std::invalid_argument("the model has a section '" + name + "' the configuration does not know");
    const SectionRecompute& sc = sections.*info->field;
    if (sc.mode == RecomputeMode::EveryN && sc.every_n < 1)
      throw std::invalid_argument("gradient_checkpointing." + name + ".every_n must be >= 1");
    const int n = std::max(1, count);
    for (int b : sc.blocks)
      if (b < 0 || b >= n)
        throw std::invalid_argument("gradient_checkpointing." + name + ".blocks (" + sc.origin.str() + "): block index " +
                                    std::to_string(b) + " out of range, the section has " + std::to_string(n) +
                                    " blocks");
  }
  check_piece_lists(pieces, sections);
  RecomputePlan plan(pieces);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PieceKey& p = pieces[i];
    const SectionRecompute& sc = sections.*find_recompute_section(p.section)->field;
    const int block = p.in_a_block() ? p.block : (blocks[p.section] == 0 ? 0 : -1);
    PieceMode mode = PieceMode::Keep;
    switch (sc.mode) {
      case RecomputeMode::None: break;
      case RecomputeMode::Full: mode = PieceMode::Recompute; break;
      case RecomputeMode::Selective: mode = runs_lean(p) ? PieceMode::Lean : PieceMode::Keep; break;
      case RecomputeMode::EveryN:
        if (block >= 0 && block % sc.every_n == 0) mode = PieceMode::Recompute;
        break;
    }
    if (block >= 0 && std::find(sc.blocks.begin(), sc.blocks.end(), block) != sc.blocks.end()) mode = PieceMode::Recompute;
    if (std::find(sc.pieces.begin(), sc.pieces.end(), p.piece_label()) != sc.pieces.end()) mode = PieceMode::Recompute;
    plan.set_mode(i, mode);
  }
  return plan;
}

}  // namespace wg
