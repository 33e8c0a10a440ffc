// Batch layout (wg-data.md §7): B = 1 equals upstream's formulas on a
// hand-worked example; B samples laid out in one batch are exactly the
// per-sample layouts concatenated in g = b·C + c order; bad batches fail
// with the stream named.
#include <gtest/gtest.h>

#include <random>

#include "wg/data/batch_layout.h"
#include "wg/data/pipeline_error.h"

namespace wg {
namespace {

StreamSample sample_with(std::vector<int32_t> src, std::vector<std::vector<int32_t>> tgt, const std::string& name) {
  StreamSample s;
  s.stream = name;
  s.source_lens = std::move(src);
  for (auto& t : tgt) {
    StepTargets st;
    st.cell_lens = std::move(t);
    s.targets.push_back(std::move(st));
  }
  return s;
}

// C = 3 cells, S = 2 streams, B = 1: upstream's §7.3 loop by hand.
TEST(BatchLayout, SingleSampleIsUpstreamLayout) {
  const StreamSample a = sample_with({2, 0, 1}, {{5, 0, 7}}, "ERA5");
  const StreamSample b = sample_with({1, 3, 0}, {{0, 2, 0}}, "obs");
  const BatchLayout lay = layout_batch({{a, b}});
  EXPECT_EQ(lay.source_cell_lens, (std::vector<int32_t>{0, 3, 3, 1}));
  EXPECT_EQ(lay.num_tokens, 7);
  // cell 0: a0 a1 b0 | cell 1: b0 b1 b2 | cell 2: a0
  EXPECT_EQ(lay.idxs_embed[0], (std::vector<int64_t>{0, 1, 6}));
  EXPECT_EQ(lay.idxs_embed_pe[0], (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(lay.idxs_embed[1], (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(lay.idxs_embed_pe[1], (std::vector<int32_t>{2, 0, 1, 2}));
  EXPECT_EQ(lay.target_coords_idx[0][0], (std::vector<int32_t>{0, 5, 0, 7}));
  EXPECT_EQ(lay.target_coords_idx[1][0], (std::vector<int32_t>{0, 0, 2, 0}));
  EXPECT_EQ(lay.max_cell_tokens, 3);
}

TEST(BatchLayout, SamplesConcatenateInGlobalCellOrder) {
  const int64_t nc = 48;
  const int ns = 3;
  const int nb = 4;
  const int nf = 2;
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> count(0, 4);
  std::vector<std::vector<StreamSample>> batch(nb);
  for (int b = 0; b < nb; ++b) {
    for (int s = 0; s < ns; ++s) {
      std::vector<int32_t> src(nc);
      std::vector<std::vector<int32_t>> tgt(nf, std::vector<int32_t>(nc));
      for (auto& v : src) v = s == 1 ? 0 : count(gen);  // stream 1 has no source tokens
      for (auto& t : tgt) {
        for (auto& v : t) v = count(gen);
      }
      batch[b].push_back(sample_with(src, tgt, "s" + std::to_string(s)));
    }
  }
  const BatchLayout all = layout_batch(batch);
  ASSERT_EQ(all.source_cell_lens.size(), static_cast<size_t>(1 + nb * nc));
  int64_t offset = 0;
  for (int b = 0; b < nb; ++b) {
    const BatchLayout one = layout_batch({batch[b]});
    for (int64_t c = 0; c < nc; ++c) {
      ASSERT_EQ(all.source_cell_lens[1 + b * nc + c], one.source_cell_lens[1 + c]);
    }
    for (int s = 0; s < ns; ++s) {
      const auto& idx = all.idxs_embed[b * ns + s];
      ASSERT_EQ(idx.size(), one.idxs_embed[s].size());
      for (size_t j = 0; j < idx.size(); ++j) ASSERT_EQ(idx[j], one.idxs_embed[s][j] + offset);
      EXPECT_EQ(all.idxs_embed_pe[b * ns + s], one.idxs_embed_pe[s]);
      for (int f = 0; f < nf; ++f) {
        for (int64_t c = 0; c < nc; ++c) {
          ASSERT_EQ(all.target_coords_idx[s][f][1 + b * nc + c], one.target_coords_idx[s][f][1 + c]);
        }
      }
    }
    offset += one.num_tokens;
  }
  EXPECT_EQ(all.num_tokens, offset);
  // Every buffer row is written exactly once.
  std::vector<int> hits(all.num_tokens, 0);
  for (const auto& idx : all.idxs_embed) {
    for (int64_t j : idx) ++hits[j];
  }
  for (int h : hits) ASSERT_EQ(h, 1);
}

TEST(BatchLayout, MismatchedSamplesNameTheStream) {
  const StreamSample a = sample_with({1, 1}, {{1, 1}}, "ERA5");
  const StreamSample b = sample_with({1, 1, 1}, {{1, 1, 1}}, "SYNOP");
  try {
    layout_batch({{a, b}});
    FAIL();
  } catch (const PipelineError& e) {
    EXPECT_EQ(std::string(e.what()), "stream 'SYNOP', source_lens: has 3 cells, expected 2");
  }
  EXPECT_THROW(layout_batch({{a}, {a, a}}), PipelineError);
}

}  // namespace
}  // namespace wg
