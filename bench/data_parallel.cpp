// Benchmark: data-parallel step time, run under mpirun (bench/data_parallel.sh
// runs it with 1 and 2 ranks and makes the table). For each bucket size
// given, a fresh trainer runs W warm-up and N timed steps; rank 0 prints one
// JSON line per bucket size with the median step time, the global samples/s,
// and the gradient allreduce time per step split into total and exposed
// (what the step waited for after backward). hidden = 1 - exposed / total.
//
//   mpirun -np R bench_data_parallel [--config F]... [--set K=V]... [--steps N] [--warmup W] [--bucket-mb X]...
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "bench_common.h"
#include "wg/config/loader.h"
#include "wg/dist/communicator.h"
#include "wg/dist/context.h"
#include "wg/train/trainer.h"
#include "wg/util/memory.h"
#include "wg/util/threads.h"

using namespace wg;

int main(int argc, char** argv) {
  DistContext dist(&argc, &argv);
  CLI::App app{"Data-parallel step time over MPI ranks, per gradient bucket size", "bench_data_parallel"};
  ConfigSources sources;
  bench::add_config_options(app, sources);
  int steps = 20, warmup = 3;
  std::vector<double> buckets;
  app.add_option("--steps", steps, "measured steps")->capture_default_str();
  app.add_option("--warmup", warmup, "warm-up steps")->capture_default_str();
  app.add_option("--bucket-mb", buckets, "gradient bucket bound in MiB (repeatable; default 25)")->allow_extra_args(false);
  bench::parse_or_exit(app, argc, argv, dist.rank());
  bench::default_config(sources);
  if (buckets.empty()) buckets = {25};
  spdlog::set_level(spdlog::level::warn);
  install_counting_allocator();
  Config config = load_config(sources);
  config.num_mini_epochs = 1000;  // never run out of steps
  const int threads = set_compute_threads(config.num_threads > 0 ? config.num_threads : 1);
  auto comm = make_mpi_communicator(dist);

  for (double mb : buckets) {
    config.ddp_bucket_mb = mb;
    Trainer t(config, Dataset(config, dist.rank(), dist.size()), resolve_plan(config), torch::kCPU, &dist, comm.get());
    std::vector<double> times;
    double comm_s = 0, exposed_s = 0;
    for (int k = 0; k < warmup + steps; ++k) {
      dist.barrier();  // steps start together: the slowest rank sets the pace, as in training
      const StepMetrics m = t.step(k);
      const double step_s = dist.allreduce_max(m.step_seconds);
      if (k == warmup - 1 && t.grad_sync()) const_cast<GradSync*>(t.grad_sync())->reset_stats();
      if (k >= warmup) times.push_back(step_s);
    }
    if (t.grad_sync()) {
      comm_s = dist.allreduce_max(t.grad_sync()->stats().comm_seconds) / steps;
      exposed_s = dist.allreduce_max(t.grad_sync()->stats().exposed_seconds) / steps;
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    if (dist.rank() == 0)
      std::printf("{\"ranks\": %d, \"threads_per_rank\": %d, \"bucket_mb\": %g, \"buckets\": %d, \"batch_per_rank\": %d, "
                  "\"step_seconds_median\": %.6g, \"samples_per_second\": %.6g, \"allreduce_seconds_per_step\": %.6g, "
                  "\"exposed_seconds_per_step\": %.6g}\n",
                  dist.size(), threads, mb, t.grad_sync() ? t.grad_sync()->num_buckets() : 0, config.batch_size_per_gpu,
                  med, dist.size() * config.batch_size_per_gpu / med, comm_s, exposed_s);
    std::fflush(stdout);
  }
  return 0;
}
