// The coordinator and rank 0's telemetry under mpirun -np 2: the exported
// memory peak of each rank equals what its allocator measured over the
// window, job aggregates name the right ranks, and embed recomputation
// shows up as a lower exported peak.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <functional>

#include "../common/tiny_config.h"
#include "dist_test_context.h"
#include "wg/dist/communicator.h"
#include "wg/telemetry/coordinator.h"
#include "wg/telemetry/job_telemetry.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"

namespace wg {
namespace {

class Recorder : public MetricsSink {
 public:
  void on_step(const StepMetrics& m) override { steps.push_back(m); }
  void on_end(const RunSummary&) override {}
  std::vector<StepMetrics> steps;
};

// Trains `steps` steps with a coordinator (window 4) on every rank and
// telemetry on rank 0; returns rank 0's exposition and this rank's steps.
// `after_step(k, telemetry)`: called after step k's metrics went to the
// coordinator (telemetry: rank 0's, else null).
std::pair<std::string, std::vector<StepMetrics>> run(const Config& c, int steps,
                                                     const std::function<void(int, JobTelemetry*)>& after_step = {}) {
  install_counting_allocator();
  const DistContext& dist = test_dist();
  auto comm = make_mpi_communicator(dist);
  Trainer t(c, Dataset(c, dist.rank(), dist.size()), resolve_plan(c), torch::kCPU, &dist, comm.get());
  std::unique_ptr<JobTelemetry> tel;
  TelemetryConfig tc;
  tc.address = "127.0.0.1";
  if (dist.rank() == 0) tel = std::make_unique<JobTelemetry>(tc, RunIdentity{"test", "", "tiny", "0", 2}, t.plan().pieces());
  Coordinator coord(dist, "cpu", 1 << 30, 4, [&]() -> const RecomputePlan& { return t.plan(); },
                    [&](const std::vector<RankWindow>& w) { if (tel) tel->on_windows(w); });
  Recorder rec;
  for (int k = 0; k < steps; ++k) {
    StepMetrics m = t.step(k);
    m.total_steps = steps;
    coord.on_step(m);
    rec.on_step(m);
    if (after_step) after_step(k, tel.get());
  }
  coord.on_end({});
  return {tel ? tel->exposition() : "", rec.steps};
}

double sample(const std::string& exposition, const std::string& series) {
  const auto at = exposition.find("\n" + series + " ");  // a sample line, not a HELP line
  if (at == std::string::npos) return -1;
  return std::stod(exposition.substr(at + series.size() + 2));
}

TEST(Coordinator, ExportedPeaksEqualTheAllocatorsAndAggregatesNameTheRanks) {
  const DistContext& dist = test_dist();
  Config c = wg::testing::tiny_config();
  c.samples_per_mini_epoch = 40;  // 10 steps: windows 1-4, 5-8, 9-10
  auto [text, steps] = run(c, 10);
  // this rank's peaks over the last window (steps 9 and 10): allocated, and
  // reserved (on CPU the resident memory, at least the allocated peak)
  const double mine = double(std::max(steps[8].peak_bytes, steps[9].peak_bytes));
  const double mine_reserved = double(std::max(steps[8].peak_reserved_bytes, steps[9].peak_reserved_bytes));
  EXPECT_GE(mine_reserved, mine);
  std::vector<double> all(size_t(dist.size())), all_reserved(size_t(dist.size()));
  MPI_Gather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(&mine_reserved, 1, MPI_DOUBLE, all_reserved.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (dist.rank() != 0) return;
  for (int r = 0; r < dist.size(); ++r) {
    const std::string labels = "{device=\"cpu\",local_rank=\"" + std::to_string(r) + "\",node=\"" +
                               dist.node().hostname + "\",rank=\"" + std::to_string(r) + "\"}";
    EXPECT_EQ(sample(text, "wgtrain_memory_peak_allocated_bytes" + labels), all[size_t(r)]) << text;
    EXPECT_EQ(sample(text, "wgtrain_memory_peak_reserved_bytes" + labels), all_reserved[size_t(r)]) << text;
    EXPECT_EQ(sample(text, "wgtrain_steps_total" + labels), 10);
  }
  // The job's largest reserved peak, named by its rank.
  const double biggest = std::max(all_reserved[0], all_reserved[1]);
  const int where = all_reserved[0] >= all_reserved[1] ? 0 : 1;
  EXPECT_EQ(sample(text, "wgtrain_job_memory_peak_max_bytes{node=\"" + dist.node().hostname + "\",rank=\"" +
                             std::to_string(where) + "\"}"),
            biggest);
  const double slow = sample(text, "wgtrain_slowest_rank"), fast = sample(text, "wgtrain_fastest_rank");
  EXPECT_TRUE((slow == 0 && fast == 1) || (slow == 1 && fast == 0) || slow == fast) << slow << " " << fast;
  EXPECT_EQ(sample(text, "wgtrain_step"), 10);
  EXPECT_NE(text.find("wgtrain_checkpoint_recomputed{node="), std::string::npos);
}

// A window is published once every rank has sent it, not when the next
// window is gathered: three steps after the first window (steps 1-4), and
// before the second, rank 0 exports step 4 and the window's length.
TEST(Coordinator, AWindowIsPublishedOnceEveryRankSentIt) {
  Config c = wg::testing::tiny_config();
  c.samples_per_mini_epoch = 32;  // 8 steps: windows 1-4, 5-8
  double published = -1, window = -1;
  run(c, 8, [&](int k, JobTelemetry* tel) {
    if (k != 6 || !tel) return;
    const std::string text = tel->exposition();
    published = sample(text, "wgtrain_step");
    window = sample(text, "wgtrain_metrics_window_seconds");
  });
  if (test_dist().rank() != 0) return;
  EXPECT_EQ(published, 4);
  EXPECT_GT(window, 0);
}

TEST(Coordinator, EmbedRecomputationLowersTheExportedPeak) {
  const DistContext& dist = test_dist();
  Config off = wg::testing::tiny_config();
  off.samples_per_mini_epoch = 32;  // 8 steps
  for (auto& s : off.streams) s.embed.dim_embed = 32;
  Config on = off;
  on.gradient_checkpointing.embed.mode = RecomputeMode::Full;
  const std::string a = run(off, 8).first, b = run(on, 8).first;
  if (dist.rank() != 0) return;
  const std::string labels = "{device=\"cpu\",local_rank=\"0\",node=\"" + dist.node().hostname + "\",rank=\"0\"}";
  const double peak_off = sample(a, "wgtrain_memory_peak_allocated_bytes" + labels);
  const double peak_on = sample(b, "wgtrain_memory_peak_allocated_bytes" + labels);
  std::cout << "exported peak, rank 0: embed recomputation off " << peak_off << " bytes, on " << peak_on << " bytes\n";
  EXPECT_GT(peak_off, 0);
  EXPECT_LT(peak_on, peak_off);
  EXPECT_NE(b.find("wgtrain_checkpoint_pieces_recomputed{node=\"" + dist.node().hostname +
                   "\",rank=\"0\",section=\"embed.ERA5\"} 6"),
            std::string::npos)
      << b;
}

}  // namespace
}  // namespace wg
