// Resolution of checkpoint settings into a per-piece plan, and its tables.
#include "wg/model/checkpoint_plan.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace wg {

SectionPieces resolve_section(const SectionCheckpointConfig& section, int num_blocks,
                              const std::string& section_name) {
  SectionPieces out;
  out.blocks.resize(static_cast<size_t>(num_blocks));
  switch (section.mode) {
    case CheckpointMode::None:
      break;
    case CheckpointMode::Full:
      out.io = true;
      for (auto& b : out.blocks) b = {true, true};
      break;
    case CheckpointMode::Selective:
      for (auto& b : out.blocks) b.attn = true;
      break;
    case CheckpointMode::EveryN:
      if (section.every_n < 1)
        throw std::invalid_argument("gradient_checkpointing." + section_name +
                                    ".every_n must be >= 1");
      for (int i = 0; i < num_blocks; i += section.every_n) out.blocks[i] = {true, true};
      break;
  }
  for (int b : section.blocks) {
    if (b < 0 || b >= num_blocks)
      throw std::invalid_argument("gradient_checkpointing." + section_name + ".blocks (" +
                                  section.origin.str() + "): block index " + std::to_string(b) +
                                  " out of range, the section has " +
                                  std::to_string(num_blocks) + " blocks");
    out.blocks[b] = {true, true};
  }
  return out;
}

CheckpointPlan resolve_checkpoint_plan(const Config& config) {
  const auto& gc = config.gradient_checkpointing;
  CheckpointPlan plan;
  int max_embed_blocks = 0;
  for (const auto& s : config.streams) max_embed_blocks = std::max(max_embed_blocks, s.embed.num_blocks);
  // Block indices are checked against the deepest stream; shallower streams
  // take the blocks they have.
  SectionPieces embed = resolve_section(gc.embed, max_embed_blocks, "embed");
  for (const auto& s : config.streams) {
    EmbedPlan e;
    e.stream = s.name;
    e.input = embed.io;
    e.readout = embed.io;
    e.blocks.assign(embed.blocks.begin(), embed.blocks.begin() + s.embed.num_blocks);
    plan.embed.push_back(std::move(e));
  }
  plan.latent.blocks = resolve_section(gc.latent, config.ae_global_num_blocks, "latent").blocks;
  // The prediction head is one block of one piece: on when anything selects it.
  SectionPieces pred = resolve_section(gc.pred, 1, "pred");
  plan.pred.head = pred.io || pred.blocks[0].mlp;
  return plan;
}

const EmbedPlan& CheckpointPlan::embed_for(const std::string& stream) const {
  for (const auto& e : embed)
    if (e.stream == stream) return e;
  throw std::out_of_range("checkpoint plan has no stream '" + stream + "'");
}

namespace {
// Visits every piece in table order as (section, piece, flag); Plan may be
// const (flag read) or not (flag writable).
template <typename Plan, typename F>
void for_each_piece(Plan& p, F&& f) {
  for (auto& e : p.embed) {
    f("embed." + e.stream, std::string("input"), e.input);
    for (size_t i = 0; i < e.blocks.size(); ++i) {
      f("embed." + e.stream, "block" + std::to_string(i) + ".attn", e.blocks[i].attn);
      f("embed." + e.stream, "block" + std::to_string(i) + ".mlp", e.blocks[i].mlp);
    }
    f("embed." + e.stream, std::string("readout"), e.readout);
  }
  for (size_t i = 0; i < p.latent.blocks.size(); ++i) {
    f(std::string("latent"), "block" + std::to_string(i) + ".attn", p.latent.blocks[i].attn);
    f(std::string("latent"), "block" + std::to_string(i) + ".mlp", p.latent.blocks[i].mlp);
  }
  f(std::string("pred"), std::string("head"), p.pred.head);
}
}  // namespace

std::string CheckpointPlan::key(const std::string& section, const std::string& piece) { return section + "/" + piece; }

std::vector<std::string> CheckpointPlan::keys() const {
  std::vector<std::string> out;
  for_each_piece(*this, [&](const std::string& s, const std::string& p, bool) { out.push_back(key(s, p)); });
  return out;
}

bool CheckpointPlan::get(const std::string& k) const {
  int found = -1;
  for_each_piece(*this, [&](const std::string& s, const std::string& p, bool on) {
    if (key(s, p) == k) found = on;
  });
  if (found < 0) throw std::out_of_range("checkpoint plan has no piece '" + k + "'");
  return found == 1;
}

void CheckpointPlan::set(const std::string& k, bool on) {
  bool found = false;
  for_each_piece(*this, [&](const std::string& s, const std::string& p, bool& flag) {
    if (key(s, p) == k) { flag = on; found = true; }
  });
  if (!found) throw std::out_of_range("checkpoint plan has no piece '" + k + "'");
}

int CheckpointPlan::pieces_total() const {
  int n = 0;
  for_each_piece(*this, [&](const std::string&, const std::string&, bool) { ++n; });
  return n;
}

int CheckpointPlan::pieces_recomputed() const {
  int n = 0;
  for_each_piece(*this, [&](const std::string&, const std::string&, bool on) { n += on; });
  return n;
}

std::string CheckpointPlan::table() const {
  std::ostringstream os;
  os << "section        piece          recompute\n";
  for_each_piece(*this, [&](const std::string& section, const std::string& piece, bool on) {
    os << section;
    for (size_t i = section.size(); i < 15; ++i) os << ' ';
    os << piece;
    for (size_t i = piece.size(); i < 15; ++i) os << ' ';
    os << (on ? "yes" : "no") << '\n';
  });
  os << "recomputed " << pieces_recomputed() << " of " << pieces_total() << " pieces";
  return os.str();
}

std::string CheckpointPlan::summary() const {
  int e_on = 0, e_all = 0, l_on = 0, l_all = 0;
  for_each_piece(*this, [&](const std::string& section, const std::string&, bool on) {
    if (section.rfind("embed", 0) == 0) { ++e_all; e_on += on; }
    else if (section == "latent") { ++l_all; l_on += on; }
  });
  std::ostringstream os;
  os << "embed " << e_on << "/" << e_all << " latent " << l_on << "/" << l_all << " pred "
     << (pred.head ? 1 : 0) << "/1";
  return os.str();
}

}  // namespace wg
