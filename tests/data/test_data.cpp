// Synthetic streams, the sampler and masking.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "wg/data/dataset.h"

namespace wg {
namespace {

StreamConfig stream() {
  StreamConfig s;
  s.name = "ERA5";
  s.token_size = 4;
  s.synthetic.num_channels = 6;
  s.synthetic.grid_lat = 8;
  s.synthetic.grid_lon = 16;
  return s;
}

TEST(Synthetic, DeterministicBySeedAndId) {
  SyntheticStream a(stream(), 1), b(stream(), 1), c(stream(), 2);
  std::vector<float> va, ca, vb, cb, vc, cc;
  a.sample(17, va, ca);
  b.sample(17, vb, cb);
  c.sample(17, vc, cc);
  EXPECT_EQ(va.size(), size_t(128 * 4 * 6));
  EXPECT_EQ(ca.size(), size_t(128 * kCentroidFeatures));
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
}

TEST(Synthetic, NormalisedChannelsHaveZeroMeanUnitVariance) {
  SyntheticStream s(stream(), 3);
  std::vector<double> sum(6), sq(6);
  int64_t n = 0;
  for (int id = 0; id < 200; ++id) {
    std::vector<float> v, c;
    s.sample(id * 7, v, c);
    for (size_t i = 0; i < v.size(); ++i) {
      sum[i % 6] += v[i];
      sq[i % 6] += v[i] * v[i];
    }
    n += int64_t(v.size() / 6);
  }
  for (int c = 0; c < 6; ++c) {
    const double mean = sum[c] / n, var = sq[c] / n - mean * mean;
    EXPECT_NEAR(mean, 0.0, 0.15) << c;
    EXPECT_NEAR(var, 1.0, 0.25) << c;
  }
}

TEST(Synthetic, NeighbouringTokensAreCorrelated) {
  // The property masked-token training relies on: a token is predictable
  // from its east neighbour.
  SyntheticStream s(stream(), 5);
  double xy = 0, xx = 0, yy = 0;
  for (int id = 0; id < 50; ++id) {
    std::vector<float> v, c;
    s.sample(id, v, c);
    const int per_token = 4 * 6;
    for (int la = 0; la < 8; ++la)
      for (int lo = 0; lo + 1 < 16; ++lo)
        for (int j = 0; j < per_token; ++j) {
          const double x = v[(la * 16 + lo) * per_token + j], y = v[(la * 16 + lo + 1) * per_token + j];
          xy += x * y;
          xx += x * x;
          yy += y * y;
        }
  }
  EXPECT_GT(xy / std::sqrt(xx * yy), 0.6);
}

TEST(Sampler, RanksAreDisjointAndTwoRanksEqualOneWithDoubleBatch) {
  Sampler one(9, 100, 8, 1), r(9, 100, 4, 2);
  EXPECT_EQ(one.steps_per_epoch(), 12);
  EXPECT_EQ(r.steps_per_epoch(), 12);
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 12; ++step) {
    auto a = r.sample_ids(1, step, 0), b = r.sample_ids(1, step, 1), both = one.sample_ids(1, step, 0);
    std::vector<int64_t> joined(a);
    joined.insert(joined.end(), b.begin(), b.end());
    EXPECT_EQ(joined, both);
    for (auto id : joined) {
      EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " drawn twice";
      EXPECT_GE(id, 100);  // epoch 1 owns [100, 200)
      EXPECT_LT(id, 200);
    }
  }
  EXPECT_NE(one.sample_ids(0, 0, 0), one.sample_ids(1, 0, 0));
}

TEST(Sampler, TooManyRanksForTheEpochIsAnError) {
  EXPECT_THROW(Sampler(1, 10, 4, 3), std::invalid_argument);
}

TEST(Masking, CountAndDeterminism) {
  auto m = token_mask(1, 42, 7, 100, 0.6, false);
  int masked = 0;
  for (auto x : m) masked += x;
  EXPECT_EQ(masked, 60);
  EXPECT_EQ(m, token_mask(1, 42, 7, 100, 0.6, false));
  EXPECT_NE(m, token_mask(1, 43, 7, 100, 0.6, false));
  // at least one token visible and one masked, whatever the rate
  auto few = token_mask(1, 1, 1, 3, 0.99, false);
  int f = 0;
  for (auto x : few) f += x;
  EXPECT_EQ(f, 2);
  // sampled rates vary across samples
  std::set<int> counts;
  for (int id = 0; id < 20; ++id) {
    int n = 0;
    for (auto x : token_mask(1, id, 1, 200, 0.6, true)) n += x;
    counts.insert(n);
  }
  EXPECT_GT(counts.size(), 5u);
}

TEST(Dataset, BatchLayout) {
  Config c;
  c.streams = {stream()};
  c.batch_size_per_gpu = 3;
  c.samples_per_mini_epoch = 30;
  c.num_mini_epochs = 2;
  Dataset d(c, 0, 1);
  EXPECT_EQ(d.total_steps(), 20);
  Batch b = d.batch(11);
  ASSERT_EQ(b.sample_ids.size(), 3u);
  EXPECT_GE(b.sample_ids[0], 30);  // step 11 is in epoch 1
  const StreamBatch& s = b.streams[0];
  EXPECT_EQ(s.values.size(), size_t(3 * 128 * 4 * 6));
  EXPECT_EQ(s.masked.size(), size_t(3 * 128));
}

TEST(Dataset, SyntheticValidationSamplesAreTheirOwnAndSplitAcrossRanks) {
  Config c;
  c.streams = {stream()};
  c.batch_size_per_gpu = 2;
  c.samples_per_mini_epoch = 40;
  c.num_mini_epochs = 1;
  c.samples_per_validation = 8;
  const Dataset r0(c, 0, 2), r1(c, 1, 2);
  ASSERT_EQ(r0.validation_steps(), 2);
  std::set<int64_t> val, train;
  for (const Dataset* d : {&r0, &r1})
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t id : d->validation_batch(i).sample_ids) EXPECT_TRUE(val.insert(id).second) << id;
  for (int64_t s = 0; s < r0.total_steps(); ++s)
    for (int64_t id : r0.batch(s).sample_ids) train.insert(id);
  EXPECT_EQ(val.size(), 8u);
  for (int64_t id : val) EXPECT_EQ(train.count(id), 0u) << "validation id " << id << " is also a training id";
  c.samples_per_validation = 0;
  EXPECT_EQ(Dataset(c, 0, 1).validation_steps(), 0);
}

TEST(Dataset, UnknownStreamTypeIsAnError) {
  Config c;
  c.streams = {stream()};
  c.streams[0].type = "netcdf";
  EXPECT_THROW(Dataset(c, 0, 1), std::invalid_argument);
}

}  // namespace
}  // namespace wg
