// Synthetic streams, the sampler and masking.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "wg/data/dataset.h"
#include "wg/data/pipeline_config.h"

namespace wg {
namespace {

StreamConfig stream() {
  StreamConfig s;
  s.name = "ERA5";
  s.type = "synthetic";
  s.token_size = 4;
  s.synthetic.num_channels = 6;
  s.synthetic.grid_lat = 8;
  s.synthetic.grid_lon = 16;
  return s;
}

// A run over January 2020 at healpix level 1: 124 windows of 6 h, of which
// 123 can start a sample (the last one's target window would end past the
// period, as upstream's candidate windows).
Config config() {
  Config c;
  c.healpix_level = 1;
  c.streams = {stream()};
  c.start_date = 1577836800;  // 2020-01-01
  c.end_date = 1580515200;    // 2020-02-01
  return c;
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

TEST(Dataset, StepsAndBatches) {
  Config c = config();
  c.batch_size_per_gpu = 3;
  c.samples_per_mini_epoch = 30;
  c.num_mini_epochs = 2;
  Dataset d(c, 0, 1);
  EXPECT_EQ(d.windows(), 123);
  EXPECT_EQ(d.total_steps(), 20);
  const BuiltBatch b = d.batch(11);
  ASSERT_EQ(b.sample_ids.size(), 3u);
  EXPECT_GE(b.sample_ids[0], 30);  // step 11 is in epoch 1
  EXPECT_EQ(b.layout.num_samples, 3);
  EXPECT_EQ(b.layout.num_cells, 48);
  ASSERT_EQ(b.samples.size(), 3u);
  EXPECT_EQ(b.samples[0][0].stream, "ERA5");
  EXPECT_GT(b.layout.num_tokens, 0);
  ASSERT_EQ(d.stream_shapes().size(), 1u);
  EXPECT_EQ(d.stream_shapes()[0].source_channels.size(), 6u);
  EXPECT_EQ(d.stream_shapes()[0].source_width(), 14);
}

TEST(Dataset, AMiniEpochHasAtMostTheWindowsOfThePeriod) {
  Config c = config();
  c.samples_per_mini_epoch = 4096;  // more than the 123 windows: upstream's len(dataset) = min(...)
  c.batch_size_per_gpu = 4;
  const Dataset d(c, 0, 1);
  EXPECT_EQ(d.samples_per_epoch(), 123);
  EXPECT_EQ(d.steps_per_epoch(), 30);
  ASSERT_FALSE(d.warnings().empty());
  EXPECT_NE(d.warnings()[0].find("123 windows"), std::string::npos) << d.warnings()[0];
}

TEST(Dataset, ValidationSamplesAreSplitAcrossRanksAndComeFromTheValidationPeriod) {
  Config c = config();
  c.batch_size_per_gpu = 4;
  c.batch_size_validation_per_gpu = 2;  // validation batches have their own size, as upstream
  c.samples_per_mini_epoch = 40;
  c.num_mini_epochs = 1;
  c.samples_per_validation = 8;
  c.start_date_val = 1583020800;  // 2020-03-01
  c.end_date_val = 1583625600;    // 2020-03-08
  const Dataset r0(c, 0, 2), r1(c, 1, 2);
  ASSERT_EQ(r0.validation_steps(), 2);
  std::set<int64_t> ids;
  for (const Dataset* d : {&r0, &r1})
    for (int64_t i = 0; i < 2; ++i) {
      const BuiltBatch b = d->validation_batch(i);
      EXPECT_EQ(b.sample_ids.size(), 2u);
      for (int64_t id : b.sample_ids) EXPECT_TRUE(ids.insert(id).second) << id;
      for (int64_t w : b.windows) EXPECT_GE(w, 0);
    }
  EXPECT_EQ(ids.size(), 8u);
  c.samples_per_validation = 0;
  EXPECT_EQ(Dataset(c, 0, 1).validation_steps(), 0);
}

// As upstream's validation set, which advances after each pass and is
// always shuffled: each pass takes other windows (and masks), and a pass has
// at most the period's windows.
TEST(Dataset, EachValidationPassTakesOtherWindowsAndAtMostThePeriods) {
  Config c = config();
  c.samples_per_mini_epoch = 40;
  c.samples_per_validation = 8;
  c.shuffle = false;              // training's order only
  c.start_date_val = 1583020800;  // 2020-03-01
  c.end_date_val = 1583625600;    // 2020-03-08
  EXPECT_TRUE(pipeline_options(c, true).shuffle);
  EXPECT_FALSE(pipeline_options(c, false).shuffle);
  const Dataset d(c, 0, 1);
  ASSERT_EQ(d.validation_steps(), 8);
  std::set<int64_t> first, second;
  for (int64_t i = 0; i < 8; ++i) {
    first.insert(d.validation_batch(i, 0).windows.at(0));
    second.insert(d.validation_batch(i, 1).windows.at(0));
  }
  EXPECT_EQ(first.size(), 8u);
  EXPECT_NE(first, second);
  c.end_date_val = 1583107200;  // one day: fewer windows than samples_per_validation
  const Dataset short_period(c, 0, 1);
  EXPECT_LT(short_period.validation_steps(), 8);
  EXPECT_GE(short_period.validation_steps(), 1);
}

TEST(Dataset, APeriodWithoutWindowsIsAnError) {
  Config c = config();
  c.end_date = c.start_date + 3600;  // shorter than one step
  try {
    Dataset d(c, 0, 1);
    FAIL() << "a period without windows was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("window"), std::string::npos) << e.what();
  }
}

// A period shorter than one global batch is named as such, not as a
// samples_per_mini_epoch the user did not set.
TEST(Dataset, APeriodShorterThanABatchNamesItsWindows) {
  Config c = config();
  c.end_date = c.start_date + 4 * 6 * 3600;  // a day of 6-hourly windows
  c.batch_size_per_gpu = 8;
  try {
    Dataset d(c, 0, 2);
    FAIL() << "a period shorter than a batch was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("windows, fewer than one global batch (batch_size_per_gpu 8 x 2 ranks = 16)"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("samples_per_mini_epoch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wg
