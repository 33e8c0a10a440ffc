// Masking (wg-data.md §5) over many samples on the O96-like grid: the rate
// follows |N(r, 1/(2.5π))| clipped to [0.01, 0.99] (or is fixed), random
// masks that fraction of tokens, healpix masks whole parent cells, channel
// masks per channel and keeps every token, causal masks the latest tokens
// of each cell, block masks one run (and works for targets), combination
// picks each strategy at its probability; the generator is keyed, and the
// validation names stream and key.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "test_pipeline_harness.h"
#include "wg/data/masking.h"
#include "wg/data/pipeline_error.h"

namespace wg {
namespace {

struct O96 {
  HealpixGrid grid{5};
  PointSet points;
  TokenPartition part;
  O96() {
    points = testing_io::o96_grid(2, 0, 6 * 3600);
    points.num_channels = 6;
    points.data = testing_io::random_channels(points.size(), 6, 5, 0.0);
    part = partition_points(grid, points, 8, true, "ERA5");
  }
};

const O96& o96() {
  static const O96 fixture;
  return fixture;
}

MaskingConfig cfg_of(MaskStrategy s, double rate = 0.6) {
  MaskingConfig c;
  c.strategy = s;
  c.masking_rate = rate;
  c.hl_mask = 2;
  return c;
}

TokenMask mask_for(const MaskingConfig& c, uint64_t sample, uint64_t stream = 0) {
  PipelineRng rng(42, 3, sample, stream, RngPurpose::Mask);
  return draw_token_mask(c, c.strategy, o96().part, 6, 5, rng);
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TEST(PipelineRng, KeyedAndReproducible) {
  PipelineRng a(1, 2, 3, 4, RngPurpose::Mask);
  PipelineRng b(1, 2, 3, 4, RngPurpose::Mask);
  PipelineRng c(1, 2, 3, 5, RngPurpose::Mask);
  PipelineRng d(1, 2, 3, 4, RngPurpose::TargetCap);
  int same_c = 0;
  int same_d = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    same_c += x == c.next_u64();
    same_d += x == d.next_u64();
  }
  EXPECT_EQ(same_c, 0);
  EXPECT_EQ(same_d, 0);
  // A sample's mask does not depend on what was drawn before (other samples).
  const TokenMask m1 = mask_for(cfg_of(MaskStrategy::Random), 17);
  mask_for(cfg_of(MaskStrategy::Random), 18);
  EXPECT_EQ(mask_for(cfg_of(MaskStrategy::Random), 17).token, m1.token);
  const auto p = PipelineRng(9, 9, 9, 9, RngPurpose::TargetCap).permutation(1000);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
}

// KS test of 20 000 rate draws against the clipped folded normal.
TEST(TokenMasking, RateFollowsClippedFoldedNormal) {
  const MaskingConfig c = cfg_of(MaskStrategy::Random, 0.6);
  const double sigma = 1.0 / (2.5 * M_PI);
  EXPECT_DOUBLE_EQ(kMaskingRateSigma, sigma);
  const int n = 20000;
  std::vector<double> r(n);
  for (int i = 0; i < n; ++i) {
    PipelineRng rng(42, 0, i, 0, RngPurpose::Mask);
    r[i] = draw_masking_rate(c, rng);
  }
  std::sort(r.begin(), r.end());
  auto cdf = [&](double x) {
    if (x < 0.01) return 0.0;
    if (x >= 0.99) return 1.0;
    return normal_cdf((x - 0.6) / sigma) - normal_cdf((-x - 0.6) / sigma);
  };
  double ks = 0.0;
  for (int i = 0; i < n; ++i) {
    ks = std::max(ks, std::fabs(cdf(r[i]) - (i + 1.0) / n));
    ks = std::max(ks, std::fabs(cdf(r[i]) - static_cast<double>(i) / n));
  }
  EXPECT_LT(ks, 1.63 / std::sqrt(n));  // 1 % level
  EXPECT_GE(r.front(), 0.01);
  EXPECT_LE(r.back(), 0.99);
  // The clip at 0.99 holds the right mass: P(|X| ≥ 0.99).
  const double at_top = static_cast<double>(std::count(r.begin(), r.end(), 0.99)) / n;
  EXPECT_NEAR(at_top, 1.0 - cdf(0.989999), 0.004);

  MaskingConfig fixed = c;
  fixed.masking_rate_sampling = false;
  PipelineRng rng(1, 1, 1, 1, RngPurpose::Mask);
  EXPECT_EQ(draw_masking_rate(fixed, rng), 0.6);
}

TEST(TokenMasking, RandomMasksTheDrawnFractionOfTokens) {
  const int64_t nt = o96().part.num_tokens();
  double sum_rate = 0.0;
  double sum_fraction = 0.0;
  for (int s = 0; s < 300; ++s) {
    const TokenMask m = mask_for(cfg_of(MaskStrategy::Random), s);
    const double fraction = std::accumulate(m.token.begin(), m.token.end(), 0.0) / nt;
    EXPECT_NEAR(fraction, m.rate, 6 * std::sqrt(0.25 / nt)) << "sample " << s;
    sum_rate += m.rate;
    sum_fraction += fraction;
  }
  EXPECT_NEAR(sum_fraction / 300, sum_rate / 300, 0.002);
  // E|N(0.6, σ)| after clipping ≈ 0.6.
  EXPECT_NEAR(sum_rate / 300, 0.6, 0.025);
}

TEST(TokenMasking, HealpixMasksWholeParentCells) {
  const TokenPartition& part = o96().part;
  for (int s = 0; s < 50; ++s) {
    const TokenMask m = mask_for(cfg_of(MaskStrategy::Healpix), s);
    ASSERT_EQ(m.cell.size(), 12288u);
    int64_t masked_parents = 0;
    for (int64_t p = 0; p < 12 * 16; ++p) {  // hl_mask 2: 192 parents of 64 children
      const uint8_t first = m.cell[p * 64];
      for (int64_t j = 1; j < 64; ++j) ASSERT_EQ(m.cell[p * 64 + j], first) << "parent " << p;
      masked_parents += first;
    }
    EXPECT_EQ(masked_parents, static_cast<int64_t>(std::nearbyint(m.rate * 192)));
    for (int64_t c = 0; c < 12288; ++c) {
      for (int64_t t = part.cell_token_start[c]; t < part.cell_token_start[c + 1]; ++t) {
        ASSERT_EQ(m.token[t], m.cell[c]);
      }
    }
    // mask_target: exactly the points of masked cells.
    const TargetSelection sel = mask_target(m, part, part);
    for (int64_t c = 0; c < 12288; ++c) {
      const int64_t npts = part.token_start[part.cell_token_start[c + 1]] - part.token_start[part.cell_token_start[c]];
      ASSERT_EQ(sel.cell_lens[c], m.cell[c] ? npts : 0);
    }
  }
}

TEST(TokenMasking, ChannelMasksPerChannelAndKeepsEveryToken) {
  const O96& f = o96();
  const int64_t nt = f.part.num_tokens();
  std::vector<double> per_channel(6, 0.0);
  double rates = 0.0;
  for (int s = 0; s < 40; ++s) {
    const TokenMask m = mask_for(cfg_of(MaskStrategy::Channel), s);
    StreamSample out;
    fill_source(f.grid, f.points, f.part, &m, 0, out);
    ASSERT_EQ(out.num_source_tokens(), nt);  // every token kept
    const int width = row_width(0, 6);
    for (int64_t t = 0; t < nt; ++t) {
      for (int j = 0; j < 6; ++j) {
        per_channel[j] += m.channel[t * 6 + j];
        if (m.channel[t * 6 + j]) {
          ASSERT_EQ(out.source_tokens[(t * 8) * width + 8 + j], 0.0f);
        }
      }
    }
    rates += m.rate;
    const TargetSelection sel = mask_target(m, f.part, f.part);
    EXPECT_EQ(sel.points.size(), f.points.size());  // every point is a target
    if (s % 10 != 0) continue;
    const StepTargets tg = build_step_targets(f.grid, f.points, f.part.point_cell, sel, &m, 0);
    for (size_t p = 0; p < sel.points.size(); p += 97) {
      for (int j = 0; j < 6; ++j) {
        ASSERT_EQ(std::isnan(tg.values[p * 6 + j]), m.channel[sel.mask_token[p] * 6 + j] == 0);
      }
    }
  }
  for (int j = 0; j < 6; ++j) EXPECT_NEAR(per_channel[j] / (40.0 * nt), rates / 40, 0.003) << "channel " << j;

  MaskingConfig global = cfg_of(MaskStrategy::Channel);
  global.channel_mode = ChannelMaskMode::Global;
  const TokenMask g = mask_for(global, 5);
  EXPECT_EQ(std::accumulate(g.channel.begin(), g.channel.begin() + 6, 0), static_cast<int>(6 * g.rate));
  for (int64_t t = 1; t < nt; ++t) {
    ASSERT_TRUE(std::equal(g.channel.begin(), g.channel.begin() + 6, g.channel.begin() + t * 6));
  }
}

TEST(TokenMasking, CausalMasksTheLatestTokensOfEachCell) {
  const O96& f = o96();
  for (int s = 0; s < 30; ++s) {
    const TokenMask m = mask_for(cfg_of(MaskStrategy::Causal), s);
    for (int64_t c = 0; c < 12288; ++c) {
      const int64_t k = f.part.cell_tokens(c);
      const int64_t t0 = f.part.cell_token_start[c];
      const int64_t expect = k <= 1 ? 0 : k - std::max<int64_t>(1, k - static_cast<int64_t>(std::floor(m.rate * k)));
      for (int64_t j = 0; j < k; ++j) ASSERT_EQ(m.token[t0 + j], j >= k - expect ? 1 : 0) << "cell " << c;
      // With two dates, a masked token is never earlier than a kept one.
      for (int64_t j = 0; j + 1 < k; ++j) {
        if (m.token[t0 + j]) {
          ASSERT_LE(f.points.times[f.part.order[f.part.token_start[t0 + j]]],
                    f.points.times[f.part.order[f.part.token_start[t0 + j + 1]]]);
        }
      }
    }
  }
}

TEST(TokenMasking, BlockMasksOneRunAndFeedsTheTarget) {
  const O96& f = o96();
  const int64_t nt = f.part.num_tokens();
  const TokenMask m = mask_for(cfg_of(MaskStrategy::Block), 3);
  const int64_t b = static_cast<int64_t>(std::nearbyint(m.rate * nt));
  const auto first = std::find(m.token.begin(), m.token.end(), 1) - m.token.begin();
  EXPECT_EQ(std::accumulate(m.token.begin(), m.token.end(), int64_t{0}), b);
  for (int64_t t = first; t < first + b; ++t) ASSERT_EQ(m.token[t], 1);
  const TargetSelection sel = mask_target(m, f.part, f.part);  // upstream raises here (§12.3)
  EXPECT_EQ(static_cast<int64_t>(sel.points.size()), f.part.token_start[first + b] - f.part.token_start[first]);
}

TEST(TokenMasking, CombinationUsesEachStrategyAtItsProbability) {
  MaskingConfig c = cfg_of(MaskStrategy::Combination);
  c.strategies = {MaskStrategy::Random, MaskStrategy::Healpix, MaskStrategy::Causal};
  c.probabilities = {0.5, 0.3, 0.2};
  std::map<MaskStrategy, int> count;
  const int n = 20000;
  for (int s = 0; s < n; ++s) ++count[draw_strategy(c, 7, 0, s, s % 3)];
  for (size_t i = 0; i < 3; ++i) {
    const double p = c.probabilities[i];
    EXPECT_NEAR(count[c.strategies[i]] / double(n), p, 4 * std::sqrt(p * (1 - p) / n)) << to_string(c.strategies[i]);
  }
  // Per stream by default; once per sample with same_strategy_per_batch.
  int differs = 0;
  for (int s = 0; s < 200; ++s) differs += draw_strategy(c, 7, 0, s, 0) != draw_strategy(c, 7, 0, s, 1);
  EXPECT_GT(differs, 50);
  c.same_strategy_per_batch = true;
  std::map<MaskStrategy, int> per_sample;
  for (int s = 0; s < 2000; ++s) {
    const MaskStrategy first = draw_strategy(c, 7, 0, s, 0);
    for (uint64_t st = 1; st < 4; ++st) ASSERT_EQ(draw_strategy(c, 7, 0, s, st), first);
    ++per_sample[first];
  }
  EXPECT_NEAR(per_sample[MaskStrategy::Random] / 2000.0, 0.5, 0.05);
}

std::string error_of(const MaskingConfig& c, std::vector<std::string> src = {"a", "b"},
                     std::vector<std::string> tgt = {"a", "b"}) {
  try {
    validate_masking("ERA5", c, 5, src, tgt);
  } catch (const PipelineError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenMasking, ValidationNamesStreamAndKey) {
  MaskingConfig hp = cfg_of(MaskStrategy::Healpix);
  hp.hl_mask = 5;
  EXPECT_EQ(error_of(hp), "stream 'ERA5', masking_strategy_config.hl_mask: must be in [0, healpix_level = 5), got 5");
  MaskingConfig comb = cfg_of(MaskStrategy::Combination);
  comb.strategies = {MaskStrategy::Random, MaskStrategy::Healpix};
  comb.probabilities = {0.5, 0.4};
  EXPECT_NE(error_of(comb).find("stream 'ERA5', masking_strategy_config.probabilities: must sum to 1"),
            std::string::npos);
  comb.probabilities = {1.0};
  EXPECT_NE(error_of(comb).find("masking_strategy_config.probabilities: has 1 entries for 2 strategies"),
            std::string::npos);
  comb.probabilities = {0.5, 0.5};
  comb.hl_mask = 7;  // healpix inside combination is checked too (upstream: not, §12.6)
  EXPECT_NE(error_of(comb).find("masking_strategy_config.hl_mask"), std::string::npos);
  comb.hl_mask = 2;
  EXPECT_EQ(error_of(comb), "(no error)");
  comb.strategies[1] = MaskStrategy::Channel;
  EXPECT_NE(
      error_of(comb, {"a", "b"}, {"a", "b", "skt"}).find("stream 'ERA5', source/target channels: channel masking"),
      std::string::npos);
  EXPECT_EQ(error_of(cfg_of(MaskStrategy::Channel)), "(no error)");
  try {
    parse_mask_strategy("ERA5", "masking_strategy", "checkerboard");
    FAIL();
  } catch (const PipelineError& e) {
    EXPECT_NE(std::string(e.what()).find("stream 'ERA5', masking_strategy: unknown masking strategy 'checkerboard'"),
              std::string::npos);
  }
  EXPECT_EQ(parse_mask_strategy("ERA5", "masking_strategy", "causal"), MaskStrategy::Causal);
  EXPECT_THROW(parse_channel_mask_mode("ERA5", "masking_strategy_config.mode", "per_token"), PipelineError);
}

}  // namespace
}  // namespace wg
