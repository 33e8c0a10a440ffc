// Benchmark: tokenising one ERA5-o96-sized sample — 40 320 points, 71 source
// channels (79 features), 72 target channels, random masking, token_size 8,
// healpix_level 5, tokenize_spacetime — on one core: the C++ pipeline
// (build_masking_sample: tokenise, mask, source tokens, target selection,
// 105 target coordinates) against the numpy reference
// (tests/data/pipeline_reference.py bench) doing the same work with the same
// mask, side by side in one run. Prints a table and writes JSON.
//
// Usage: bench_tokenize [--repeats N] [--python-repeats N] [--out PATH]
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "bench_median.h"
#include "wg/data/stream_sample.h"
#include "wg/data/tokenizer.h"
#include "wg/io/npy.h"

namespace {

using wg::bench::upper_median;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Octahedral reduced Gaussian grid O96: ring i from a pole has 4i + 16 points.
wg::PointSet o96(int64_t time, int n_channels, uint64_t seed) {
  const int n = 192;
  std::vector<double> lat(n);
  for (int i = 0; i < n; ++i) {
    double x = std::cos(M_PI * (i + 0.75) / (n + 0.5));
    for (int it = 0; it < 100; ++it) {
      double p0 = 1.0, p1 = x;
      for (int k = 2; k <= n; ++k) {
        const double p2 = ((2.0 * k - 1.0) * x * p1 - (k - 1.0) * p0) / k;
        p0 = p1;
        p1 = p2;
      }
      const double dx = p1 / (n * (x * p1 - p0) / (x * x - 1.0));
      x -= dx;
      if (std::fabs(dx) < 1e-16) break;
    }
    lat[i] = std::asin(x) * 180.0 / M_PI;
  }
  wg::PointSet p;
  for (int r = 0; r < n; ++r) {
    const int ring = r < 96 ? r + 1 : 192 - r;
    for (int j = 0; j < 4 * ring + 16; ++j) {
      p.lat.push_back(static_cast<float>(lat[r]));
      p.lon.push_back(static_cast<float>(std::fmod(360.0 * j / (4 * ring + 16) + 180.0, 360.0) - 180.0));
    }
  }
  p.times.assign(p.lat.size(), time);
  p.num_channels = n_channels;
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nv(0.0f, 1.0f);
  p.data.resize(p.lat.size() * n_channels);
  for (float& v : p.data) v = nv(gen);
  return p;
}

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timing {
  std::vector<double> wall, cpu;
  double best_wall() const { return *std::min_element(wall.begin(), wall.end()); }
  double best_cpu() const { return *std::min_element(cpu.begin(), cpu.end()); }
};

template <typename F>
Timing time_it(int repeats, F&& f) {
  Timing t;
  for (int r = 0; r < repeats; ++r) {
    const auto w0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    f();
    t.cpu.push_back(thread_cpu_seconds() - c0);
    t.wall.push_back(std::chrono::duration<double>(Clock::now() - w0).count());
  }
  return t;
}

// Smallest number of the JSON list `key` (the reference prints {"seconds": [...], ...}).
double json_min(const std::string& json, const std::string& key) {
  const size_t a = json.find('[', json.find("\"" + key + "\""));
  const size_t b = json.find(']', a);
  double best = 1e300;
  std::string list = json.substr(a + 1, b - a - 1);
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    best = std::min(best, std::stod(list.substr(pos, end - pos)));
    pos = end + 1;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 30;
  int py_repeats = 10;
  std::string json_path = "bench/results/tokenize.json";
  CLI::App app{"Tokenising one ERA5-o96-sized sample on one core: C++ against the numpy reference", "bench_tokenize"};
  app.add_option("--repeats", repeats, "C++ repetitions (best of)")->capture_default_str();
  app.add_option("--python-repeats", py_repeats, "numpy reference repetitions (best of)")->capture_default_str();
  app.add_option("--out", json_path, "JSON results")->capture_default_str();
  wg::bench::parse_or_exit(app, argc, argv);
  // One core for both sides (the Python child inherits the affinity).
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(sched_getcpu(), &set);
  sched_setaffinity(0, sizeof set, &set);

  const int64_t window_start = 1262304000;
  const auto t_grid = Clock::now();
  const wg::HealpixGrid grid(5);
  const double grid_s = std::chrono::duration<double>(Clock::now() - t_grid).count();
  const wg::PointSet source = o96(window_start, 71, 1);
  wg::PointSet target = source;
  target.num_channels = 72;
  target.data = o96(window_start, 72, 2).data;

  wg::StreamTokenConfig cfg;
  cfg.name = "ERA5";
  wg::MaskingConfig masking;  // random, rate ~ |N(0.6, σ)|
  const wg::SampleKey key{1, 0, 7, 0};
  // Fresh buffers per sample (what a one-shot call costs) and one reused
  // StreamSample (a loader keeping one per stream).
  wg::StreamSample sample;
  const Timing fresh = time_it(repeats, [&] {
    sample = wg::build_masking_sample(grid, cfg, masking, masking.strategy, source, target, window_start, {}, key);
  });
  wg::StreamSample reused;
  const Timing reuse = time_it(repeats, [&] {
    wg::build_masking_sample(grid, cfg, masking, masking.strategy, source, target, window_start, {}, key, reused);
  });

  // The same sample for the reference: same points, the C++ mask as input.
  const fs::path dir = fs::temp_directory_path() / ("wg_bench_tokenize_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto n = static_cast<int64_t>(source.size());
  wg::npy::write(dir / "lat.npy", source.lat);
  wg::npy::write(dir / "lon.npy", source.lon);
  wg::npy::write(dir / "times.npy", source.times);
  wg::npy::write(dir / "geo.npy", std::vector<float>{}, {n, 0});
  wg::npy::write(dir / "src.npy", source.data, {n, 71});
  wg::npy::write(dir / "tgt.npy", target.data, {n, 72});
  const wg::TokenPartition part = wg::partition_points(grid, source, 8, true, "ERA5");
  wg::PipelineRng rng(key.seed, key.mini_epoch, key.sample_id, key.stream, wg::RngPurpose::Mask);
  const wg::TokenMask mask = wg::draw_token_mask(masking, masking.strategy, part, 71, 5, rng);
  wg::npy::write(dir / "mask.npy", mask.token);
  std::ofstream(dir / "manifest.json")
      << "{\"level\": 5, \"pointsets\": {\"o96\": {\"lat\": \"lat.npy\", \"lon\": \"lon.npy\", \"times\": "
         "\"times.npy\", \"geo\": \"geo.npy\", \"data\": {\"src\": \"src.npy\", \"tgt\": \"tgt.npy\"}}},\n"
      << " \"cases\": [{\"name\": \"bench\", \"points\": \"o96\", \"source\": \"src\", \"target\": \"tgt\", "
         "\"token_size\": 8, \"spacetime\": true, \"window_start\": "
      << window_start
      << ", \"sampling_rate_target\": 1.0, \"max_num_targets\": -1, \"mode\": \"masking\", \"strategy\": "
         "\"random\", \"all_masked\": false, \"token_masked\": \"mask.npy\"}]}\n";
  const std::string cmd = std::string("OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ") + WG_PYTHON3 + " " +
                          WG_DATA_SCRIPTS + "/pipeline_reference.py bench " + dir.string() + " " +
                          std::to_string(py_repeats);
  std::string py_json;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t k; (k = fread(buf, 1, sizeof buf, p)) > 0;) py_json.append(buf, k);
    if (pclose(p) != 0) py_json.clear();
  }
  fs::remove_all(dir);
  if (py_json.find("seconds") == std::string::npos) {
    std::fprintf(stderr, "numpy reference failed: %s\n", cmd.c_str());
    return 1;
  }
  const double py_wall = json_min(py_json, "seconds");
  const double py_cpu = json_min(py_json, "cpu_seconds");
  const long long kept = sample.num_source_tokens();
  const long long targets = sample.targets[0].num_points();

  std::printf(
      "tokenise one ERA5-o96 sample: %zu points, 71 + 8 = 79 source features, 72 target channels,\n"
      "random masking (rate %.3f), token_size 8, healpix_level 5, spacetime, one core; best of N\n\n",
      source.size(), sample.masking_rate);
  std::printf(
      "| implementation | wall (ms) | CPU (ms) | median wall (ms) | repeats | speed-up (CPU) |\n"
      "|---|---|---|---|---|---|\n");
  std::printf("| numpy reference (pipeline_reference.py) | %.2f | %.2f | - | %d | 1.0x |\n", py_wall * 1e3,
              py_cpu * 1e3, py_repeats);
  std::printf("| C++ build_masking_sample, fresh buffers | %.2f | %.2f | %.2f | %d | %.1fx |\n",
              fresh.best_wall() * 1e3, fresh.best_cpu() * 1e3, upper_median(fresh.wall) * 1e3, repeats,
              py_cpu / fresh.best_cpu());
  std::printf("| C++ build_masking_sample, reused StreamSample | %.2f | %.2f | %.2f | %d | %.1fx |\n",
              reuse.best_wall() * 1e3, reuse.best_cpu() * 1e3, upper_median(reuse.wall) * 1e3, repeats,
              py_cpu / reuse.best_cpu());
  std::printf(
      "\nsource tokens kept %lld of %lld, target points %lld; HealpixGrid(5) tables built once in %.1f ms "
      "(not timed above)\n",
      kept, static_cast<long long>(part.num_tokens()), targets, grid_s * 1e3);
  if (fs::path(json_path).has_parent_path()) fs::create_directories(fs::path(json_path).parent_path());
  std::ofstream(json_path) << "{\"points\": " << source.size() << ", \"source_features\": 79, "
                           << "\"target_channels\": 72, \"token_size\": 8, \"healpix_level\": 5, "
                           << "\"masking_rate\": " << sample.masking_rate << ", \"source_tokens_kept\": " << kept
                           << ", \"target_points\": " << targets << ", \"repeats\": " << repeats
                           << ", \"cpp_fresh_best_wall_s\": " << fresh.best_wall()
                           << ", \"cpp_fresh_best_cpu_s\": " << fresh.best_cpu()
                           << ", \"cpp_reused_best_wall_s\": " << reuse.best_wall()
                           << ", \"cpp_reused_best_cpu_s\": " << reuse.best_cpu()
                           << ", \"numpy_best_wall_s\": " << py_wall << ", \"numpy_best_cpu_s\": " << py_cpu
                           << ", \"speedup_cpu_fresh\": " << py_cpu / fresh.best_cpu()
                           << ", \"speedup_cpu_reused\": " << py_cpu / reuse.best_cpu()
                           << ", \"grid_tables_s\": " << grid_s
                           << ", \"numpy_raw\": " << py_json.substr(0, py_json.find('\n')) << "}\n";
  std::printf("wrote %s\n", json_path.c_str());
  return 0;
}
