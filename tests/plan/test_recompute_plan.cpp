// The plan resolver: every mode, block lists, range errors, the table; and
// the one spelling of a piece key.
#include <gtest/gtest.h>

#include "wg/plan/recompute_plan.h"

namespace wg {
namespace {

// The plan's decision for the piece spelled `key`.
bool on(const RecomputePlan& p, const std::string& key) {
  const auto k = PieceKey::parse(key);
  if (!k) throw std::invalid_argument("not a key: " + key);
  return p.get(*k);
}

Config two_streams() {
  Config c;
  StreamConfig a, b;
  a.name = "ERA5";
  a.embed.num_blocks = 4;
  b.name = "SYNOP";
  b.embed.num_blocks = 2;
  c.streams = {a, b};
  c.ae_global_num_blocks = 6;
  return c;
}

// Per block of `section` (e.g. "latent", "embed.ERA5"): is its `kind` piece recomputed?
std::vector<bool> blocks(const RecomputePlan& p, const std::string& section, const std::string& kind, int n) {
  std::vector<bool> v;
  for (int b = 0; b < n; ++b) v.push_back(on(p, section + "/block" + std::to_string(b) + "." + kind));
  return v;
}
std::vector<bool> attn(const RecomputePlan& p, const std::string& section, int n) { return blocks(p, section, "attn", n); }
std::vector<bool> mlp(const RecomputePlan& p, const std::string& section, int n) { return blocks(p, section, "mlp", n); }

Config two_streams_none() {
  Config c = two_streams();
  c.gradient_checkpointing.embed.mode = RecomputeMode::None;  // the default config recomputes embed
  return c;
}

TEST(RecomputePlan, NoneWhenEverySectionIsNone) {
  const auto p = resolve_plan(two_streams_none());
  EXPECT_EQ(p.pieces_recomputed(), 0);
  // ERA5: input + 4*2 + readout = 10; SYNOP: 1 + 4 + 1 = 6; latent 12; pred 1
  EXPECT_EQ(p.pieces_total(), 29);
}

TEST(RecomputePlan, FullTurnsOnEveryPieceOfTheSection) {
  Config c = two_streams_none();
  c.gradient_checkpointing.embed.mode = RecomputeMode::Full;
  const auto p = resolve_plan(c);
  for (const std::string s : {"embed.ERA5", "embed.SYNOP"}) {
    EXPECT_TRUE(on(p, s + "/input"));
    EXPECT_TRUE(on(p, s + "/readout"));
  }
  EXPECT_EQ(attn(p, "embed.ERA5", 4), std::vector<bool>(4, true));
  EXPECT_EQ(mlp(p, "embed.ERA5", 4), std::vector<bool>(4, true));
  EXPECT_EQ(attn(p, "embed.SYNOP", 2), std::vector<bool>(2, true));
  EXPECT_THROW(on(p, "embed.SYNOP/block2.attn"), std::out_of_range);  // SYNOP has 2 blocks
  EXPECT_EQ(p.pieces_recomputed(), 16);
  EXPECT_FALSE(on(p, "pred/head"));
}

TEST(RecomputePlan, SelectiveIsAttentionOnly) {
  Config c = two_streams_none();
  c.gradient_checkpointing.latent.mode = RecomputeMode::Selective;
  const auto p = resolve_plan(c);
  EXPECT_EQ(attn(p, "latent", 6), std::vector<bool>(6, true));
  EXPECT_EQ(mlp(p, "latent", 6), std::vector<bool>(6, false));
}

TEST(RecomputePlan, EveryNAndBlockList) {
  Config c = two_streams_none();
  c.gradient_checkpointing.latent.mode = RecomputeMode::EveryN;
  c.gradient_checkpointing.latent.every_n = 4;
  c.gradient_checkpointing.latent.blocks = {1};
  const auto p = resolve_plan(c);
  EXPECT_EQ(attn(p, "latent", 6), (std::vector<bool>{true, true, false, false, true, false}));
  EXPECT_EQ(mlp(p, "latent", 6), (std::vector<bool>{true, true, false, false, true, false}));
}

TEST(RecomputePlan, BlockListAloneAndShallowerStreams) {
  Config c = two_streams_none();
  c.gradient_checkpointing.embed.blocks = {1, 3};
  const auto p = resolve_plan(c);
  EXPECT_EQ(attn(p, "embed.ERA5", 4), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(attn(p, "embed.SYNOP", 2), (std::vector<bool>{false, true}));
  EXPECT_FALSE(on(p, "embed.ERA5/input"));
}

TEST(RecomputePlan, PredHeadFollowsFullOrItsBlock) {
  Config c = two_streams_none();
  c.gradient_checkpointing.pred.mode = RecomputeMode::Full;
  EXPECT_TRUE(on(resolve_plan(c), "pred/head"));
  c.gradient_checkpointing.pred.mode = RecomputeMode::Selective;  // no attention in a head
  EXPECT_FALSE(on(resolve_plan(c), "pred/head"));
  c.gradient_checkpointing.pred.blocks = {0};
  EXPECT_TRUE(on(resolve_plan(c), "pred/head"));
  c.gradient_checkpointing.pred = {};
  c.gradient_checkpointing.pred.mode = RecomputeMode::EveryN;  // block 0 is every n-th
  c.gradient_checkpointing.pred.every_n = 3;
  EXPECT_TRUE(on(resolve_plan(c), "pred/head"));
}

TEST(RecomputePlan, BlockIndexOutOfRangeNamesTheKey) {
  Config c = two_streams_none();
  c.gradient_checkpointing.latent.blocks = {6};
  c.gradient_checkpointing.latent.origin = {"my.yml", 12};
  try {
    resolve_plan(c);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gradient_checkpointing.latent.blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("my.yml:12"), std::string::npos) << m;
    EXPECT_NE(m.find("has 6 blocks"), std::string::npos) << m;
  }
}

TEST(RecomputePlan, TableListsEveryPiece) {
  Config c = two_streams_none();
  c.gradient_checkpointing.embed.mode = RecomputeMode::Selective;
  const auto p = resolve_plan(c);
  const std::string t = p.table();
  EXPECT_NE(t.find("embed.ERA5     block3.attn    yes"), std::string::npos) << t;
  EXPECT_NE(t.find("embed.ERA5     block3.mlp     no"), std::string::npos) << t;
  EXPECT_NE(t.find("pred           head           no"), std::string::npos) << t;
  EXPECT_NE(t.find("recomputed 6 of 29 pieces"), std::string::npos) << t;
  EXPECT_EQ(p.summary(), "embed 6/16 latent 0/12 pred 0/1");
}

TEST(RecomputePlan, ModelPiecesInForwardOrder) {
  const auto pieces = model_pieces(two_streams());
  ASSERT_EQ(pieces.size(), 29u);
  EXPECT_EQ(pieces.front().str(), "embed.ERA5/input");
  EXPECT_EQ(pieces[1].str(), "embed.ERA5/block0.attn");
  EXPECT_EQ(pieces[9].str(), "embed.ERA5/readout");
  EXPECT_EQ(pieces[10].str(), "embed.SYNOP/input");
  EXPECT_EQ(pieces[16].str(), "latent/block0.attn");
  EXPECT_EQ(pieces.back().str(), "pred/head");
}

TEST(PieceKey, OneSpellingParsesBack) {
  for (const std::string text : {"embed.ERA5/input", "embed.ERA5/block12.attn", "embed.S.Y/readout",
                                 "latent/block1.mlp", "pred/head"}) {
    const auto k = PieceKey::parse(text);
    ASSERT_TRUE(k) << text;
    EXPECT_EQ(k->str(), text);
  }
  const auto k = *PieceKey::parse("embed.ERA5/block3.mlp");
  EXPECT_EQ(k.section, "embed");
  EXPECT_EQ(k.stream, "ERA5");
  EXPECT_EQ(k.block, 3);
  EXPECT_EQ(k.kind, PieceKind::Mlp);
  EXPECT_EQ(k.section_label(), "embed.ERA5");
  EXPECT_EQ(k.piece_label(), "block3.mlp");
  for (const std::string bad : {"", "embed", "embed/", "/input", "embed./input", "latent/block.attn", "latent/blockx.mlp",
                                "latent/block1", "latent/attn", "pred/block0.head", "pred/tail", "latent/block1.mlp.x"})
    EXPECT_FALSE(PieceKey::parse(bad)) << bad;
}

}  // namespace
}  // namespace wg
