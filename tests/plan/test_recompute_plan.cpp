// The plan resolver: the model's pieces per configuration (seven sections in
// forward order), every mode, block lists, range errors, the table; and the
// one spelling of a piece key.
#include <gtest/gtest.h>

#include <algorithm>

#include "wg/config/recompute_sections.h"
#include "wg/plan/recompute_plan.h"

namespace wg {
namespace {

// The plan's decision for the piece spelled `key`.
bool on(const RecomputePlan& p, const std::string& key) {
  const auto k = PieceKey::parse(key);
  if (!k) throw std::invalid_argument("not a key: " + key);
  return p.get(*k);
}

std::vector<std::string> keys(const std::vector<PieceKey>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(p.str());
  return out;
}

// ERA5: 4 embed blocks, 2 decoder layers; SYNOP: 2 embed blocks, 1 decoder
// layer. ae_local 2 blocks, adapter 3 pieces, aggregation 2 blocks,
// ae_global 6 blocks, no forecast engine (forecast_policy null).
Config two_streams() {
  Config c;
  StreamConfig a, b;
  a.name = "ERA5";
  a.embed.num_blocks = 4;
  a.target_readout.num_layers = 2;
  b.name = "SYNOP";
  b.embed.num_blocks = 2;
  b.target_readout.num_layers = 1;
  c.streams = {a, b};
  c.ae_local_num_blocks = 2;
  c.ae_aggregation_num_blocks = 2;
  c.ae_global_num_blocks = 6;
  c.fe_num_blocks = 3;  // no effect without forecast_policy
  return c;
}
// embed 10 + 6, ae_local 4, ae_adapter 3, ae_aggregation 4, ae_global 12,
// pred ERA5 1 + 2*3 + 1 = 8, pred SYNOP 1 + 3 + 1 = 5.
constexpr int kTwoStreamsPieces = 16 + 4 + 3 + 4 + 12 + 8 + 5;

// Per block of `section` (e.g. "ae_global", "embed.ERA5"): is its `kind` piece recomputed?
std::vector<bool> blocks(const RecomputePlan& p, const std::string& section, const std::string& kind, int n) {
  std::vector<bool> v;
  for (int b = 0; b < n; ++b) v.push_back(on(p, section + "/block" + std::to_string(b) + "." + kind));
  return v;
}
std::vector<bool> attn(const RecomputePlan& p, const std::string& section, int n) { return blocks(p, section, "attn", n); }
std::vector<bool> mlp(const RecomputePlan& p, const std::string& section, int n) { return blocks(p, section, "mlp", n); }

Config two_streams_none() {
  Config c = two_streams();
  c.gradient_checkpointing = every_section(RecomputeMode::None);  // the defaults recompute some sections
  return c;
}

TEST(RecomputePlan, NoneWhenEverySectionIsNone) {
  const auto p = resolve_plan(two_streams_none());
  EXPECT_EQ(p.pieces_recomputed(), 0);
  EXPECT_EQ(p.pieces_total(), kTwoStreamsPieces);
}

TEST(RecomputePlan, DefaultsRecomputeAggregationForecastAndDecoderBlocks) {
  Config c = two_streams();  // RecomputeConfig{}: upstream's PR #1168 defaults
  c.forecast_policy = "fixed";
  const auto p = resolve_plan(c);
  for (size_t i = 0; i < p.size(); ++i) {
    const PieceKey& k = p.pieces()[i];
    const bool want =
        k.section == "ae_aggregation" || k.section == "forecast" || (k.section == "pred" && k.in_a_block());
    EXPECT_EQ(p.recomputed(i), want) << k.str();
  }
  // aggregation 4, forecast 3 blocks * 2, decoder blocks 2*3 + 1*3
  EXPECT_EQ(p.pieces_recomputed(), 4 + 6 + 9);
  EXPECT_FALSE(on(p, "pred.ERA5/input"));
  EXPECT_FALSE(on(p, "pred.ERA5/head"));
  EXPECT_TRUE(on(p, "pred.SYNOP/block0.cross"));
}

TEST(RecomputePlan, FullTurnsOnEveryPieceOfTheSection) {
  Config c = two_streams_none();
  c.gradient_checkpointing.embed.mode = RecomputeMode::Full;
  auto p = resolve_plan(c);
  for (const std::string s : {"embed.ERA5", "embed.SYNOP"}) {
    EXPECT_TRUE(on(p, s + "/input"));
    EXPECT_TRUE(on(p, s + "/readout"));
  }
  EXPECT_EQ(attn(p, "embed.ERA5", 4), std::vector<bool>(4, true));
  EXPECT_EQ(mlp(p, "embed.ERA5", 4), std::vector<bool>(4, true));
  EXPECT_EQ(attn(p, "embed.SYNOP", 2), std::vector<bool>(2, true));
  EXPECT_THROW(on(p, "embed.SYNOP/block2.attn"), std::out_of_range);  // SYNOP has 2 blocks
  EXPECT_EQ(p.pieces_recomputed(), 16);
  EXPECT_FALSE(on(p, "pred.ERA5/head"));
  // The decoder: coordinate embedding, every layer's pieces, head.
  c = two_streams_none();
  c.gradient_checkpointing.pred.mode = RecomputeMode::Full;
  p = resolve_plan(c);
  EXPECT_EQ(p.pieces_recomputed(), 13);
  EXPECT_TRUE(on(p, "pred.SYNOP/input"));
  EXPECT_TRUE(on(p, "pred.SYNOP/head"));
  EXPECT_TRUE(on(p, "pred.ERA5/block1.cross"));
  // The adapter: all three pieces.
  c = two_streams_none();
  c.gradient_checkpointing.ae_adapter.mode = RecomputeMode::Full;
  p = resolve_plan(c);
  EXPECT_EQ(p.pieces_recomputed(), 3);
  for (const char* k : {"ae_adapter/block0.cross", "ae_adapter/block0.mlp", "ae_adapter/block1.cross"})
    EXPECT_TRUE(on(p, k)) << k;
}

TEST(RecomputePlan, SelectiveMakesEveryBlockPieceLean) {
  Config c = two_streams_none();
  c.gradient_checkpointing.ae_global.mode = RecomputeMode::Selective;
  c.gradient_checkpointing.ae_adapter.mode = RecomputeMode::Selective;
  c.gradient_checkpointing.pred.mode = RecomputeMode::Selective;
  const auto p = resolve_plan(c);
  EXPECT_EQ(p.pieces_recomputed(), 0);  // nothing is run again as a whole
  const auto mode = [&p](const std::string& key) { return p.mode(*PieceKey::parse(key)); };
  for (int b = 0; b < 6; ++b)
    for (const char* kind : {"attn", "mlp"})
      EXPECT_EQ(mode("ae_global/block" + std::to_string(b) + "." + kind), PieceMode::Lean) << b << kind;
  for (const char* k : {"ae_adapter/block0.cross", "ae_adapter/block0.mlp", "ae_adapter/block1.cross",
                        "pred.ERA5/block0.cross", "pred.ERA5/block1.attn", "pred.ERA5/block1.mlp"})
    EXPECT_EQ(mode(k), PieceMode::Lean) << k;
  // Pieces outside blocks are kept, but an embed's input and read-out, which are lean; full recomputes them.
  EXPECT_EQ(mode("pred.ERA5/input"), PieceMode::Keep);
  EXPECT_EQ(mode("pred.ERA5/head"), PieceMode::Keep);
  EXPECT_EQ(mode("ae_local/block0.attn"), PieceMode::Keep);  // sections left at none
  EXPECT_EQ(p.pieces_lean(), 12 + 3 + (3 * 2 + 3));
  c.gradient_checkpointing.embed.mode = RecomputeMode::Selective;
  const auto e = resolve_plan(c);
  const auto e_mode = [&e](const std::string& key) { return e.mode(*PieceKey::parse(key)); };
  EXPECT_EQ(e_mode("embed.ERA5/readout"), PieceMode::Lean);
  EXPECT_EQ(e_mode("embed.ERA5/block0.attn"), PieceMode::Lean);
  // and its input, whose output a lean block 0 attention makes again (piece.h)
  EXPECT_EQ(e_mode("embed.ERA5/input"), PieceMode::Lean);
  // A block list on top of selective recomputes those blocks as a whole.
  c.gradient_checkpointing.ae_global.blocks = {2};
  const auto q = resolve_plan(c);
  EXPECT_EQ(q.mode(*PieceKey::parse("ae_global/block2.attn")), PieceMode::Recompute);
  EXPECT_EQ(q.mode(*PieceKey::parse("ae_global/block2.mlp")), PieceMode::Recompute);
  EXPECT_EQ(q.mode(*PieceKey::parse("ae_global/block3.mlp")), PieceMode::Lean);
}

TEST(RecomputePlan, EveryNAndBlockList) {
  Config c = two_streams_none();
  c.gradient_checkpointing.ae_global.mode = RecomputeMode::EveryN;
  c.gradient_checkpointing.ae_global.every_n = 4;
  c.gradient_checkpointing.ae_global.blocks = {1};
  const auto p = resolve_plan(c);
  EXPECT_EQ(attn(p, "ae_global", 6), (std::vector<bool>{true, true, false, false, true, false}));
  EXPECT_EQ(mlp(p, "ae_global", 6), (std::vector<bool>{true, true, false, false, true, false}));
  EXPECT_EQ(p.pieces_recomputed(), 6);
}

TEST(RecomputePlan, EveryNOfTheAdapterCountsItsTwoBlocks) {
  Config c = two_streams_none();
  c.gradient_checkpointing.ae_adapter.mode = RecomputeMode::EveryN;
  c.gradient_checkpointing.ae_adapter.every_n = 2;
  auto p = resolve_plan(c);
  EXPECT_TRUE(on(p, "ae_adapter/block0.cross"));
  EXPECT_TRUE(on(p, "ae_adapter/block0.mlp"));
  EXPECT_FALSE(on(p, "ae_adapter/block1.cross"));
  c.gradient_checkpointing.ae_adapter.mode = RecomputeMode::None;
  c.gradient_checkpointing.ae_adapter.blocks = {1};
  p = resolve_plan(c);
  EXPECT_FALSE(on(p, "ae_adapter/block0.cross"));
  EXPECT_TRUE(on(p, "ae_adapter/block1.cross"));
  c.gradient_checkpointing.ae_adapter.blocks = {2};
  EXPECT_THROW(resolve_plan(c), std::invalid_argument);
}

TEST(RecomputePlan, BlockListAloneAndShallowerStreams) {
  Config c = two_streams_none();
  c.gradient_checkpointing.embed.blocks = {1, 3};
  c.gradient_checkpointing.pred.blocks = {1};
  const auto p = resolve_plan(c);
  EXPECT_EQ(attn(p, "embed.ERA5", 4), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(attn(p, "embed.SYNOP", 2), (std::vector<bool>{false, true}));
  EXPECT_FALSE(on(p, "embed.ERA5/input"));
  // The decoder's layer 1 exists in ERA5 only.
  EXPECT_EQ(blocks(p, "pred.ERA5", "cross", 2), (std::vector<bool>{false, true}));
  EXPECT_EQ(mlp(p, "pred.ERA5", 2), (std::vector<bool>{false, true}));
  EXPECT_FALSE(on(p, "pred.SYNOP/block0.cross"));
  EXPECT_FALSE(on(p, "pred.ERA5/head"));
}

// A piece list on top of a mode recomputes those pieces whole, in every
// stream that has them; a lean piece it names is then recomputed instead.
TEST(RecomputePlan, PieceListOnTopOfTheMode) {
  Config c = two_streams_none();
  c.gradient_checkpointing.embed.mode = RecomputeMode::Selective;
  c.gradient_checkpointing.embed.pieces = {"block1.attn", "readout"};
  c.gradient_checkpointing.pred.pieces = {"block1.mlp", "head"};
  const auto p = resolve_plan(c);
  const auto mode = [&p](const std::string& key) { return p.mode(*PieceKey::parse(key)); };
  for (const char* stream : {"embed.ERA5", "embed.SYNOP"}) {
    const std::string s = stream;
    EXPECT_EQ(mode(s + "/block1.attn"), PieceMode::Recompute) << s;
    EXPECT_EQ(mode(s + "/block1.mlp"), PieceMode::Lean) << s;
    EXPECT_EQ(mode(s + "/block0.attn"), PieceMode::Lean) << s;
    EXPECT_EQ(mode(s + "/readout"), PieceMode::Recompute) << s;
    EXPECT_EQ(mode(s + "/input"), PieceMode::Lean) << s;
  }
  EXPECT_EQ(mode("pred.ERA5/block1.mlp"), PieceMode::Recompute);  // SYNOP's decoder has no layer 1
  EXPECT_EQ(mode("pred.ERA5/block1.cross"), PieceMode::Keep);
  EXPECT_EQ(mode("pred.ERA5/head"), PieceMode::Recompute);
  EXPECT_EQ(mode("pred.SYNOP/head"), PieceMode::Recompute);
  EXPECT_EQ(mode("pred.SYNOP/block0.mlp"), PieceMode::Keep);
  EXPECT_EQ(p.pieces_recomputed(), 2 * 2 + 1 + 2);
}

// The message resolve_plan throws for `c` ("" when it throws none).
std::string plan_error(const Config& c) {
  try {
    resolve_plan(c);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(RecomputePlan, APieceTheSectionLacksIsAnErrorThatSaysWhereAndWhichItHas) {
  Config c = two_streams_none();
  c.gradient_checkpointing.ae_adapter.pieces = {"block0.cross", "block1.mlp"};  // block 1 has no MLP
  c.gradient_checkpointing.ae_adapter.pieces_origin = Origin{"plan.yml", 4};
  EXPECT_EQ(plan_error(c),
            "plan.yml:4: ae_adapter.pieces names 'block1.mlp', which is not a piece of the ae_adapter section (its "
            "pieces: block0.cross, block0.mlp, block1.cross)");
  c.gradient_checkpointing.ae_adapter.pieces = {"block0.cross"};
  EXPECT_TRUE(on(resolve_plan(c), "ae_adapter/block0.cross"));
  // A section the model lacks: no forecast engine here.
  c.gradient_checkpointing.forecast.pieces = {"block0.attn"};
  c.gradient_checkpointing.forecast.pieces_origin = Origin{"plan.yml", 7};
  EXPECT_EQ(plan_error(c), "plan.yml:7: forecast.pieces names 'block0.attn', but this model has no forecast pieces");
}

TEST(RecomputePlan, PredInputAndHeadFollowFullOnly) {
  // In a section with blocks, the pieces outside them are recomputed by `full` only.
  Config c = two_streams_none();
  c.gradient_checkpointing.pred.mode = RecomputeMode::Full;
  EXPECT_TRUE(on(resolve_plan(c), "pred.ERA5/head"));
  EXPECT_TRUE(on(resolve_plan(c), "pred.ERA5/input"));
  c.gradient_checkpointing.pred.mode = RecomputeMode::Selective;  // no attention in a head
  EXPECT_FALSE(on(resolve_plan(c), "pred.ERA5/head"));
  c.gradient_checkpointing.pred.blocks = {0};
  EXPECT_FALSE(on(resolve_plan(c), "pred.ERA5/head"));
  EXPECT_TRUE(on(resolve_plan(c), "pred.ERA5/block0.mlp"));
  c.gradient_checkpointing.pred = {};
  c.gradient_checkpointing.pred.mode = RecomputeMode::EveryN;  // the boolean's false: every block
  c.gradient_checkpointing.pred.every_n = 1;
  const auto p = resolve_plan(c);
  EXPECT_FALSE(on(p, "pred.ERA5/head"));
  EXPECT_FALSE(on(p, "pred.ERA5/input"));
  EXPECT_EQ(mlp(p, "pred.ERA5", 2), std::vector<bool>(2, true));
  EXPECT_EQ(p.pieces_recomputed(), 9);
}

TEST(RecomputePlan, SectionWithoutBlockPiecesIsBlockZero) {
  // A section made only of pieces outside blocks counts as one block, block 0.
  const std::vector<PieceKey> pieces = {PieceKey::io("pred", "X", PieceKind::Input),
                                        PieceKey::io("pred", "X", PieceKind::Head)};
  RecomputeConfig r = every_section(RecomputeMode::None);
  EXPECT_EQ(resolve_plan(pieces, r).pieces_recomputed(), 0);
  r.pred.blocks = {0};
  EXPECT_EQ(resolve_plan(pieces, r).pieces_recomputed(), 2);
  r.pred = {};
  r.pred.mode = RecomputeMode::EveryN;
  r.pred.every_n = 3;
  EXPECT_EQ(resolve_plan(pieces, r).pieces_recomputed(), 2);
  r.pred = {};
  r.pred.blocks = {1};
  EXPECT_THROW(resolve_plan(pieces, r), std::invalid_argument);
}

TEST(RecomputePlan, BlockIndexOutOfRangeNamesTheKey) {
  Config c = two_streams_none();
  c.gradient_checkpointing.ae_global.blocks = {6};
  c.gradient_checkpointing.ae_global.origin = {"my.yml", 12};
  try {
    resolve_plan(c);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gradient_checkpointing.ae_global.blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("my.yml:12"), std::string::npos) << m;
    EXPECT_NE(m.find("has 6 blocks"), std::string::npos) << m;
  }
  c = two_streams_none();
  c.gradient_checkpointing.pred.blocks = {2};  // the deepest decoder has 2 layers
  EXPECT_THROW(resolve_plan(c), std::invalid_argument);
  c.gradient_checkpointing.pred.blocks = {1};
  EXPECT_NO_THROW(resolve_plan(c));
}

TEST(RecomputePlan, EveryNBelowOneAndUnknownSectionsAreErrors) {
  Config c = two_streams_none();
  c.gradient_checkpointing.ae_local.mode = RecomputeMode::EveryN;
  c.gradient_checkpointing.ae_local.every_n = 0;
  try {
    resolve_plan(c);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gradient_checkpointing.ae_local.every_n must be >= 1"), std::string::npos)
        << e.what();
  }
  // `latent` is a configuration alias, not a section of the model.
  try {
    resolve_plan({PieceKey::in_block("latent", "", 0, PieceKind::Mlp)}, RecomputeConfig{});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("section 'latent'"), std::string::npos) << e.what();
  }
}

TEST(RecomputePlan, TableListsEveryPiece) {
  Config c = two_streams_none();
  c.gradient_checkpointing.embed.mode = RecomputeMode::Selective;
  c.gradient_checkpointing.ae_adapter.mode = RecomputeMode::Selective;
  const auto p = resolve_plan(c);
  const std::string t = p.table();
  EXPECT_NE(t.find("embed.ERA5     block3.attn    lean"), std::string::npos) << t;
  EXPECT_NE(t.find("embed.ERA5     block3.mlp     lean"), std::string::npos) << t;
  EXPECT_NE(t.find("embed.ERA5     readout        lean"), std::string::npos) << t;
  EXPECT_NE(t.find("embed.ERA5     input          lean"), std::string::npos) << t;
  EXPECT_NE(t.find("ae_adapter     block0.cross   lean"), std::string::npos) << t;
  EXPECT_NE(t.find("ae_adapter     block0.mlp     lean"), std::string::npos) << t;
  EXPECT_NE(t.find("ae_aggregation block1.mlp     no"), std::string::npos) << t;
  EXPECT_NE(t.find("pred.SYNOP     block0.cross   no"), std::string::npos) << t;
  EXPECT_NE(t.find("pred.ERA5      head           no"), std::string::npos) << t;
  EXPECT_NE(t.find("recomputed 0 of " + std::to_string(kTwoStreamsPieces) + " pieces, 19 lean"), std::string::npos)
      << t;
  EXPECT_EQ(p.summary(),
            "embed 0/16 (16 lean) ae_local 0/4 ae_adapter 0/3 (3 lean) ae_aggregation 0/4 ae_global 0/12 pred 0/13");
  c.gradient_checkpointing.ae_local.mode = RecomputeMode::Full;
  EXPECT_EQ(resolve_plan(c).summary(),
            "embed 0/16 (16 lean) ae_local 4/4 ae_adapter 0/3 (3 lean) ae_aggregation 0/4 ae_global 0/12 pred 0/13");
}

TEST(RecomputePlan, ModelPiecesInForwardOrder) {
  const auto pieces = model_pieces(two_streams());
  const std::vector<std::string> want = {
      "embed.ERA5/input", "embed.ERA5/block0.attn", "embed.ERA5/block0.mlp", "embed.ERA5/block1.attn",
      "embed.ERA5/block1.mlp", "embed.ERA5/block2.attn", "embed.ERA5/block2.mlp", "embed.ERA5/block3.attn",
      "embed.ERA5/block3.mlp", "embed.ERA5/readout",
      "embed.SYNOP/input", "embed.SYNOP/block0.attn", "embed.SYNOP/block0.mlp", "embed.SYNOP/block1.attn",
      "embed.SYNOP/block1.mlp", "embed.SYNOP/readout",
      "ae_local/block0.attn", "ae_local/block0.mlp", "ae_local/block1.attn", "ae_local/block1.mlp",
      "ae_adapter/block0.cross", "ae_adapter/block0.mlp", "ae_adapter/block1.cross",
      "ae_aggregation/block0.attn", "ae_aggregation/block0.mlp", "ae_aggregation/block1.attn",
      "ae_aggregation/block1.mlp",
      "ae_global/block0.attn", "ae_global/block0.mlp", "ae_global/block1.attn", "ae_global/block1.mlp",
      "ae_global/block2.attn", "ae_global/block2.mlp", "ae_global/block3.attn", "ae_global/block3.mlp",
      "ae_global/block4.attn", "ae_global/block4.mlp", "ae_global/block5.attn", "ae_global/block5.mlp",
      "pred.ERA5/input", "pred.ERA5/block0.cross", "pred.ERA5/block0.attn", "pred.ERA5/block0.mlp",
      "pred.ERA5/block1.cross", "pred.ERA5/block1.attn", "pred.ERA5/block1.mlp", "pred.ERA5/head",
      "pred.SYNOP/input", "pred.SYNOP/block0.cross", "pred.SYNOP/block0.attn", "pred.SYNOP/block0.mlp",
      "pred.SYNOP/head"};
  EXPECT_EQ(keys(pieces), want);
  ASSERT_EQ(pieces.size(), size_t(kTwoStreamsPieces));
  EXPECT_EQ(pieces[20].kind, PieceKind::CrossAttention);
  EXPECT_EQ(pieces[20].block, 0);
  // Every section of the model is a section of the configuration.
  for (const auto& p : pieces) EXPECT_NE(find_recompute_section(p.section), nullptr) << p.str();
}

TEST(RecomputePlan, ModelPiecesWithAForecastEngine) {
  Config c = two_streams();
  c.forecast_policy = "fixed";
  c.fe_num_blocks = 2;
  const auto k = keys(model_pieces(c));
  ASSERT_EQ(k.size(), size_t(kTwoStreamsPieces + 4));
  // Between the global engine and the decoder.
  const auto at = std::find(k.begin(), k.end(), "forecast/block0.attn") - k.begin();
  ASSERT_LT(size_t(at), k.size());
  EXPECT_EQ(k[size_t(at) - 1], "ae_global/block5.mlp");
  EXPECT_EQ(std::vector<std::string>(k.begin() + at, k.begin() + at + 5),
            (std::vector<std::string>{"forecast/block0.attn", "forecast/block0.mlp", "forecast/block1.attn",
                                      "forecast/block1.mlp", "pred.ERA5/input"}));
  c.forecast_policy = "sequential";
  EXPECT_EQ(model_pieces(c).size(), size_t(kTwoStreamsPieces + 4));
  c.forecast_policy = "";  // no engine without a policy, whatever fe_num_blocks says
  const auto none = keys(model_pieces(c));
  EXPECT_EQ(std::count_if(none.begin(), none.end(), [](const std::string& s) { return s.rfind("forecast/", 0) == 0; }), 0);
  // A forecast plan: every_n over the engine's blocks.
  c.forecast_policy = "fixed";
  c.fe_num_blocks = 3;
  c.gradient_checkpointing = every_section(RecomputeMode::None);
  c.gradient_checkpointing.forecast.mode = RecomputeMode::EveryN;
  c.gradient_checkpointing.forecast.every_n = 2;
  const auto p = resolve_plan(c);
  EXPECT_EQ(attn(p, "forecast", 3), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(p.pieces_recomputed(), 4);
}

TEST(RecomputePlan, ModelPiecesWithoutDecoderSelfAttention) {
  Config c = two_streams();
  c.pred_self_attention = false;
  const auto pieces = model_pieces(c);
  EXPECT_EQ(pieces.size(), size_t(kTwoStreamsPieces - 3));
  const auto k = keys(pieces);
  const auto at = std::find(k.begin(), k.end(), "pred.ERA5/input") - k.begin();
  EXPECT_EQ(std::vector<std::string>(k.begin() + at, k.end()),
            (std::vector<std::string>{"pred.ERA5/input", "pred.ERA5/block0.cross", "pred.ERA5/block0.mlp",
                                      "pred.ERA5/block1.cross", "pred.ERA5/block1.mlp", "pred.ERA5/head",
                                      "pred.SYNOP/input", "pred.SYNOP/block0.cross", "pred.SYNOP/block0.mlp",
                                      "pred.SYNOP/head"}));
  // The embed and global engines keep their self-attention.
  EXPECT_NE(std::find(k.begin(), k.end(), "ae_global/block0.attn"), k.end());
  c.gradient_checkpointing = every_section(RecomputeMode::Full);
  const auto p = resolve_plan(c);
  EXPECT_THROW(on(p, "pred.ERA5/block0.attn"), std::out_of_range);
  EXPECT_TRUE(on(p, "pred.ERA5/block0.cross"));
  EXPECT_TRUE(on(p, "pred.ERA5/block0.mlp"));
}

TEST(RecomputePlan, ModelPiecesWithADiagnosticStream) {
  // A diagnostic stream has no source tokens: no embed transformer, but a decoder.
  Config c = two_streams();
  c.streams[1].diagnostic = true;
  const auto k = keys(model_pieces(c));
  EXPECT_EQ(k.size(), size_t(kTwoStreamsPieces - 6));
  EXPECT_EQ(std::count_if(k.begin(), k.end(), [](const std::string& s) { return s.rfind("embed.SYNOP/", 0) == 0; }), 0);
  EXPECT_EQ(std::count_if(k.begin(), k.end(), [](const std::string& s) { return s.rfind("embed.ERA5/", 0) == 0; }), 10);
  EXPECT_EQ(std::count_if(k.begin(), k.end(), [](const std::string& s) { return s.rfind("pred.SYNOP/", 0) == 0; }), 5);
  EXPECT_EQ(k.back(), "pred.SYNOP/head");
  // Its decoder follows the pred setting like any other.
  c.gradient_checkpointing = every_section(RecomputeMode::Full);
  const auto p = resolve_plan(c);
  EXPECT_TRUE(on(p, "pred.SYNOP/head"));
  EXPECT_EQ(p.pieces_recomputed(), p.pieces_total());
}

TEST(PieceKey, OneSpellingParsesBack) {
  for (const std::string text : {"embed.ERA5/input", "embed.ERA5/block12.attn", "embed.S.Y/readout",
                                 "ae_global/block1.mlp", "pred.ERA5/head", "ae_adapter/block0.cross",
                                 "pred.SYNOP/block3.cross", "forecast/block0.attn", "ae_aggregation/block1.mlp"}) {
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
  const auto x = *PieceKey::parse("pred.ERA5/block1.cross");
  EXPECT_EQ(x.section, "pred");
  EXPECT_EQ(x.stream, "ERA5");
  EXPECT_EQ(x.block, 1);
  EXPECT_EQ(x.kind, PieceKind::CrossAttention);
  EXPECT_TRUE(x.is_attention());
  EXPECT_STREQ(piece_kind_name(PieceKind::CrossAttention), "cross");
  EXPECT_EQ(PieceKey::in_block("ae_adapter", "", 1, PieceKind::CrossAttention).str(), "ae_adapter/block1.cross");
  EXPECT_FALSE(PieceKey::parse("ae_global/block0.mlp")->is_attention());
  for (const std::string bad : {"", "embed", "embed/", "/input", "embed./input", "ae_global/block.attn",
                                "ae_global/blockx.mlp", "ae_global/block1", "ae_global/attn", "ae_adapter/cross",
                                "pred.ERA5/block0.head", "pred/tail", "ae_global/block1.mlp.x",
                                "ae_adapter/block0.crossattn"})
    EXPECT_FALSE(PieceKey::parse(bad)) << bad;
}

}  // namespace
}  // namespace wg
