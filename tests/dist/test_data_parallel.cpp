// Data-parallel training, run under `mpirun -np 2` (see tests/CMakeLists.txt):
// every test runs on both ranks and asserts across them.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <optional>

#include "../common/tiny_config.h"
#include "dist_test_context.h"
#include "wg/dist/communicator.h"
#include "wg/dist/context.h"
#include "wg/dist/devices.h"
#include "wg/config/recompute_sections.h"
#include "wg/train/train_checkpoint.h"
#include "wg/train/trainer.h"

namespace wg {
namespace {


Config dp_config() {
  Config c = wg::testing::without_dropout(wg::testing::tiny_config());
  c.masking_rate_sampling = false;  // same masked count per sample: per-rank means average to the global mean
  c.samples_per_mini_epoch = 32;
  c.ddp_bucket_mb = 0.01;  // several buckets even for the tiny model
  return c;
}

std::vector<float> flat_params(Trainer& t) {
  std::vector<float> out;
  for (const auto& p : t.model()->parameters()) {
    torch::Tensor c = p.detach().contiguous().view(-1);
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}

// True when every rank holds exactly these values.
bool identical_across_ranks(const std::vector<float>& v) {
  std::vector<float> lo(v.size()), hi(v.size());
  MPI_Allreduce(v.data(), lo.data(), int(v.size()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(v.data(), hi.data(), int(v.size()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

void train(Trainer& t, int steps) {
  for (int k = 0; k < steps; ++k) {
    torch::manual_seed(500 + k);  // the embed's final dropout: same draws on every rank
    t.step(k);
  }
}

TEST(DataParallel, RanksHoldBitIdenticalParametersAfterTraining) {
  ASSERT_EQ(test_dist().size(), 2) << "run under mpirun -np 2";
  Config c = dp_config();
  c.embed_dropout_rate = 0.1;  // different dropout per rank is fine: gradients are averaged
  auto comm = make_mpi_communicator(test_dist());
  torch::manual_seed(test_dist().rank());  // different initial weights: rank 0's are broadcast
  Trainer t(c, Dataset(c, test_dist().rank(), test_dist().size()), resolve_plan(c),
            torch::kCPU, &test_dist(), comm.get());
  ASSERT_GT(t.grad_sync()->num_buckets(), 3);
  EXPECT_TRUE(identical_across_ranks(flat_params(t)));
  train(t, 8);
  EXPECT_TRUE(identical_across_ranks(flat_params(t)));
}

TEST(DataParallel, TwoRanksWithBatchBMatchOneRankWithBatch2B) {
  Config c = dp_config();
  auto comm = make_mpi_communicator(test_dist());
  Trainer two(c, Dataset(c, test_dist().rank(), test_dist().size()), resolve_plan(c),
              torch::kCPU, &test_dist(), comm.get());
  Config big = c;
  big.batch_size_per_gpu = 2 * c.batch_size_per_gpu;
  big.samples_per_mini_epoch = c.samples_per_mini_epoch;
  big.lr.lr_scaling_policy = "const";
  Config scaled = c;
  scaled.lr.lr_scaling_policy = "const";  // same learning rate in both runs
  Trainer dp(scaled, Dataset(scaled, test_dist().rank(), test_dist().size()), resolve_plan(scaled),
             torch::kCPU, &test_dist(), comm.get());
  Trainer one(big, Dataset(big, 0, 1), resolve_plan(big), torch::kCPU);  // alone, no communication
  ASSERT_EQ(dp.total_steps(), one.total_steps());
  for (int k = 0; k < 8; ++k) {
    torch::manual_seed(k);
    const double l2 = dp.step(k).loss;
    torch::manual_seed(k);
    const double l1 = one.step(k).loss;
    const double mean2 = test_dist().allreduce_sum(l2) / 2;
    EXPECT_NEAR(mean2, l1, 1e-5 * std::abs(l1)) << "step " << k;
  }
  auto a = dp.model()->named_parameters(), b = one.model()->named_parameters();
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = (a[i].value() - b[i].value()).abs().max().item<double>();
    if (d > worst) worst = d, worst_name = a[i].key();
  }
  EXPECT_LT(worst, 2e-5) << worst_name;
  (void)two;
}

TEST(DataParallel, DifferentPlansPerRankTrainTheSameModel) {
  Config c = dp_config();
  auto comm = make_mpi_communicator(test_dist());
  Config mine = c;
  if (test_dist().rank() == 0)
    mine.gradient_checkpointing = every_section(RecomputeMode::Full);  // rank 0 recomputes everything, rank 1 nothing
  Trainer mixed(mine, Dataset(mine, test_dist().rank(), test_dist().size()), resolve_plan(mine),
                torch::kCPU, &test_dist(), comm.get());
  Trainer plain(c, Dataset(c, test_dist().rank(), test_dist().size()), resolve_plan(c),
                torch::kCPU, &test_dist(), comm.get());
  EXPECT_EQ(resolve_plan(mine).pieces_recomputed() > 0, test_dist().rank() == 0);
  train(mixed, 6);
  train(plain, 6);
  EXPECT_EQ(flat_params(mixed), flat_params(plain));
  EXPECT_TRUE(identical_across_ranks(flat_params(mixed)));
}

TEST(DataParallel, ParametersWithoutGradientStayInLockstep) {
  Config c = dp_config();
  c.streams[1].loss_weight = 0.0;  // SYNOP's prediction head gets no gradient
  auto comm = make_mpi_communicator(test_dist());
  Trainer t(c, Dataset(c, test_dist().rank(), test_dist().size()), resolve_plan(c),
            torch::kCPU, &test_dist(), comm.get());
  train(t, 4);
  EXPECT_TRUE(identical_across_ranks(flat_params(t)));
  ASSERT_NE(t.grad_sync(), nullptr) << "no gradient sync: run under mpirun -np 2, as ctest does";
  EXPECT_GT(t.grad_sync()->stats().buckets, 0);
}

TEST(DataParallel, NcclAllreduceOnTheGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  if (!nccl_compiled_in()) GTEST_SKIP() << "this build has no NCCL";
  const int device = device_for_local_rank(test_dist().node().local_rank, cuda_device_count());
  auto comm = make_nccl_communicator(test_dist(), device);
  EXPECT_EQ(comm->name(), "nccl");
  EXPECT_EQ(comm->size(), test_dist().size());  // bench/gpu/run.sh runs it on one rank
  torch::Tensor x = torch::full({4}, float(test_dist().rank() + 1), torch::Device(torch::kCUDA, device));
  comm->allreduce_sum(x.data_ptr<float>(), size_t(x.numel()));
  const int n = test_dist().size();
  EXPECT_EQ(x.cpu()[0].item<float>(), float(n * (n + 1) / 2));
}

// A rank that is slower (here: rank 1 sleeps in its backward) makes the
// other wait: the wait shows in the other's sync_wait_seconds, and the slow
// rank has the most time of its own (step less wait), which the straggler
// alert and wgtrain_slowest_rank read.
TEST(DataParallel, TheFasterRankWaitsForTheSlowerOne) {
  Config c = dp_config();
  auto comm = make_mpi_communicator(test_dist());
  Trainer t(c, Dataset(c, test_dist().rank(), test_dist().size()), resolve_plan(c), torch::kCPU, &test_dist(),
            comm.get());
  if (test_dist().rank() == 1) t.model()->parameters()[0].register_hook([](torch::Tensor) { ::usleep(300000); });
  torch::manual_seed(500);
  t.step(0);  // the first step allocates AdamW's moments
  torch::manual_seed(501);
  const StepMetrics m = t.step(1);
  const double busy = m.step_seconds - m.sync_wait_seconds;
  const double most = test_dist().allreduce_max(busy), least = -test_dist().allreduce_max(-busy);
  EXPECT_GT(most - least, 0.2) << "rank 1's 0.3 s are its own time, not rank 0's";
  if (test_dist().rank() == 0) {
    EXPECT_GT(m.sync_wait_seconds, 0.2) << "rank 0 waited for rank 1's 0.3 s";
    EXPECT_EQ(busy, least);
  } else {
    EXPECT_LT(m.sync_wait_seconds, 0.1) << "rank 1 waits for nobody";
    EXPECT_EQ(busy, most);
  }
}

// The loss scaler moves on every rank together (an overflow on one rank
// skips the step and halves the scale on all), and a checkpoint carries it.
TEST(DataParallel, TheLossScaleMovesTogetherAndSurvivesACheckpoint) {
  Config c = dp_config();
  c.loss_scaling = "on";
  auto comm = make_mpi_communicator(test_dist());
  Trainer t(c, Dataset(c, test_dist().rank(), test_dist().size()), resolve_plan(c), torch::kCPU, &test_dist(),
            comm.get());
  torch::Tensor p = t.model()->parameters()[0];
  unsigned hook = 0;
  if (test_dist().rank() == 1) hook = p.register_hook([](torch::Tensor g) { return torch::full_like(g, INFINITY); });
  torch::manual_seed(500);
  EXPECT_TRUE(t.step(0).skipped);
  EXPECT_EQ(t.loss_scaler().scale(), 32768.0);
  if (test_dist().rank() == 1) p.remove_hook(hook);
  torch::manual_seed(501);
  EXPECT_FALSE(t.step(1).skipped);
  EXPECT_EQ(t.loss_scaler().growth_tracker(), 1);
  EXPECT_TRUE(identical_across_ranks(flat_params(t)));
  const std::string dir = test_dist().broadcast_string(
      (std::filesystem::temp_directory_path() / ("wg_loss_scale_" + std::to_string(::getpid()))).string());
  save_checkpoint(dir, t, 2, test_dist(), 1);
  t.loss_scaler().restore(8.0, 0);
  ASSERT_EQ(resume_latest(dir, t, test_dist()), std::optional<int64_t>(2));
  EXPECT_EQ(t.loss_scaler().scale(), 32768.0);
  EXPECT_EQ(t.loss_scaler().growth_tracker(), 1);
  test_dist().barrier();
  if (test_dist().rank() == 0) std::filesystem::remove_all(dir);
}

// A training checkpoint holds each rank's GPU generator too (dropout draws
// there): after resuming, the GPU draws what it drew after the save.
TEST(DataParallel, GpuGeneratorStateSurvivesACheckpoint) {
  if (cuda_device_count() == 0 || !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  const int device = device_for_local_rank(test_dist().node().local_rank, cuda_device_count());
  const torch::Device gpu(torch::kCUDA, device);
  Config c = dp_config();
  c.device = "cuda";
  Trainer t(c, Dataset(c, test_dist().rank(), test_dist().size()), resolve_plan(c), gpu);
  const std::string dir = test_dist().broadcast_string(
      (std::filesystem::temp_directory_path() / ("wg_gpu_rng_" + std::to_string(::getpid()))).string());
  torch::cuda::manual_seed_all(7 + uint64_t(test_dist().rank()));
  save_checkpoint(dir, t, 3, test_dist(), 1);
  const torch::Tensor after_save = torch::rand({8}, gpu).cpu();
  torch::cuda::manual_seed_all(99);  // elsewhere
  ASSERT_EQ(resume_latest(dir, t, test_dist()), std::optional<int64_t>(3));
  EXPECT_TRUE(torch::equal(torch::rand({8}, gpu).cpu(), after_save));
  test_dist().barrier();
  if (test_dist().rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace wg

namespace wg {
namespace {
const DistContext* g_dist = nullptr;  // set once in main, read-only after
}  // namespace
const DistContext& test_dist() { return *g_dist; }
}  // namespace wg

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  wg::DistContext dist(&argc, &argv);
  wg::g_dist = &dist;
  at::set_num_threads(1);
  // Only rank 0 prints gtest's report; both ranks' failures set the exit code.
  if (dist.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  const double any_failed = dist.allreduce_max(rc);
  return any_failed != 0 ? 1 : 0;
}
