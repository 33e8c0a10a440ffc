// The plan resolver: every mode, block lists, range errors, the table.
#include <gtest/gtest.h>

#include "wg/model/checkpoint_plan.h"

namespace wg {
namespace {

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

std::vector<bool> attn(const std::vector<BlockPlan>& b) {
  std::vector<bool> v;
  for (auto x : b) v.push_back(x.attn);
  return v;
}
std::vector<bool> mlp(const std::vector<BlockPlan>& b) {
  std::vector<bool> v;
  for (auto x : b) v.push_back(x.mlp);
  return v;
}

TEST(CheckpointPlan, NoneByDefault) {
  const auto p = resolve_checkpoint_plan(two_streams());
  EXPECT_EQ(p.pieces_recomputed(), 0);
  // ERA5: input + 4*2 + readout = 10; SYNOP: 1 + 4 + 1 = 6; latent 12; pred 1
  EXPECT_EQ(p.pieces_total(), 29);
}

TEST(CheckpointPlan, FullTurnsOnEveryPieceOfTheSection) {
  Config c = two_streams();
  c.gradient_checkpointing.embed.mode = CheckpointMode::Full;
  const auto p = resolve_checkpoint_plan(c);
  for (const auto& e : p.embed) {
    EXPECT_TRUE(e.input);
    EXPECT_TRUE(e.readout);
    for (auto b : e.blocks) EXPECT_TRUE(b.attn && b.mlp);
  }
  EXPECT_EQ(p.embed[1].blocks.size(), 2u);
  EXPECT_EQ(p.pieces_recomputed(), 16);
  EXPECT_FALSE(p.pred.head);
}

TEST(CheckpointPlan, SelectiveIsAttentionOnly) {
  Config c = two_streams();
  c.gradient_checkpointing.latent.mode = CheckpointMode::Selective;
  const auto p = resolve_checkpoint_plan(c);
  EXPECT_EQ(attn(p.latent.blocks), std::vector<bool>(6, true));
  EXPECT_EQ(mlp(p.latent.blocks), std::vector<bool>(6, false));
}

TEST(CheckpointPlan, EveryNAndBlockList) {
  Config c = two_streams();
  c.gradient_checkpointing.latent.mode = CheckpointMode::EveryN;
  c.gradient_checkpointing.latent.every_n = 4;
  c.gradient_checkpointing.latent.blocks = {1};
  const auto p = resolve_checkpoint_plan(c);
  EXPECT_EQ(attn(p.latent.blocks), (std::vector<bool>{true, true, false, false, true, false}));
  EXPECT_EQ(mlp(p.latent.blocks), (std::vector<bool>{true, true, false, false, true, false}));
}

TEST(CheckpointPlan, BlockListAloneAndShallowerStreams) {
  Config c = two_streams();
  c.gradient_checkpointing.embed.blocks = {1, 3};
  const auto p = resolve_checkpoint_plan(c);
  EXPECT_EQ(attn(p.embed_for("ERA5").blocks), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(attn(p.embed_for("SYNOP").blocks), (std::vector<bool>{false, true}));
  EXPECT_FALSE(p.embed_for("ERA5").input);
}

TEST(CheckpointPlan, PredHeadFollowsFullOrItsBlock) {
  Config c = two_streams();
  c.gradient_checkpointing.pred.mode = CheckpointMode::Full;
  EXPECT_TRUE(resolve_checkpoint_plan(c).pred.head);
  c.gradient_checkpointing.pred.mode = CheckpointMode::Selective;  // no attention in a head
  EXPECT_FALSE(resolve_checkpoint_plan(c).pred.head);
  c.gradient_checkpointing.pred.blocks = {0};
  EXPECT_TRUE(resolve_checkpoint_plan(c).pred.head);
}

TEST(CheckpointPlan, BlockIndexOutOfRangeNamesTheKey) {
  Config c = two_streams();
  c.gradient_checkpointing.latent.blocks = {6};
  c.gradient_checkpointing.latent.origin = {"my.yml", 12};
  try {
    resolve_checkpoint_plan(c);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gradient_checkpointing.latent.blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("my.yml:12"), std::string::npos) << m;
    EXPECT_NE(m.find("has 6 blocks"), std::string::npos) << m;
  }
}

TEST(CheckpointPlan, TableListsEveryPiece) {
  Config c = two_streams();
  c.gradient_checkpointing.embed.mode = CheckpointMode::Selective;
  const auto p = resolve_checkpoint_plan(c);
  const std::string t = p.table();
  EXPECT_NE(t.find("embed.ERA5     block3.attn    yes"), std::string::npos) << t;
  EXPECT_NE(t.find("embed.ERA5     block3.mlp     no"), std::string::npos) << t;
  EXPECT_NE(t.find("pred           head           no"), std::string::npos) << t;
  EXPECT_NE(t.find("recomputed 6 of 29 pieces"), std::string::npos) << t;
  EXPECT_EQ(p.summary(), "embed 6/16 latent 0/12 pred 0/1");
}

}  // namespace
}  // namespace wg
