// Benchmark: the per-point sample builder on an ERA5-o96-sized anemoi store
// (40,320 cells of an O96 grid, ERA5 v8's 101 variables, 6-hourly dates;
// written once by tests/data/make_anemoi_grid_store.py), with ERA5's
// default excludes (71 source channels → 79 features, 72 target channels),
// random masking, token_size 8, healpix_level 5, tokenize_spacetime.
//
// Times per sample, one thread, page cache warm: the Zarr read of one date
// alone, the reader (read + normalise into source and target PointSets),
// the tokeniser/masking/targets (build_masking_sample on those PointSets)
// and SampleBuilder::sample end to end; then `--threads` loader threads
// building samples at once (loader_num_workers). From the threaded rate it
// derives the shortest training step for which the loader keeps data
// waiting under 5% of a step (batch 1): step > interval / 1.05.
// Prints a table and writes JSON.
//
// Usage: bench_sample_builder [--store DIR] [--samples N] [--threads N] [--out PATH]
#include "wg/data/sample_builder.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "wg/data/anemoi_reader.h"
#include "wg/io/zarr.h"
#include "wg/util/dates.h"
#include "wg/util/side_thread.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double thread_cpu() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Stats {
  std::vector<double> wall, cpu;  // seconds per call
  double mean(const std::vector<double>& v) const {
    return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  }
  double pct(std::vector<double> v, double q) const {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
  }
};

template <typename F>
Stats time_each(int n, F&& f) {
  Stats s;
  for (int i = 0; i < n; ++i) {
    const auto w0 = Clock::now();
    const double c0 = thread_cpu();
    f(i);
    s.cpu.push_back(thread_cpu() - c0);
    s.wall.push_back(std::chrono::duration<double>(Clock::now() - w0).count());
  }
  return s;
}

void row(const char* name, const Stats& s, std::string& json) {
  std::printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", name, s.mean(s.wall) * 1e3, s.pct(s.wall, 0.5) * 1e3,
              s.pct(s.wall, 0.9) * 1e3, s.mean(s.cpu) * 1e3);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "\"%s\": {\"mean_wall_ms\": %.4f, \"median_wall_ms\": %.4f, \"p90_wall_ms\": %.4f, "
                "\"mean_cpu_ms\": %.4f}, ",
                name, s.mean(s.wall) * 1e3, s.pct(s.wall, 0.5) * 1e3, s.pct(s.wall, 0.9) * 1e3, s.mean(s.cpu) * 1e3);
  json += buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string store = (fs::temp_directory_path() / "wg_bench_o96.zarr").string();
  std::string out = "bench/results/sample_builder.json";
  int samples = 32, threads = 2, dates = 36;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--store")
      store = next();
    else if (a == "--samples")
      samples = std::stoi(next());
    else if (a == "--threads")
      threads = std::stoi(next());
    else if (a == "--out")
      out = next();
    else if (a == "--help") {
      std::printf("bench_sample_builder [--store DIR] [--samples N] [--threads N] [--out PATH]\n");
      return 0;
    } else {
      std::fprintf(stderr, "error: unknown option '%s'\n", a.c_str());
      return 2;
    }
  }
  if (!fs::exists(fs::path(store) / ".zgroup")) {
    const std::string cmd = std::string(WG_PYTHON3) + " " + WG_DATA_SCRIPTS + "/make_anemoi_grid_store.py " + store +
                            " --grid 96 --dates " + std::to_string(dates) + " > /dev/null";
    std::printf("writing %s (O96, 101 variables, %d dates) …\n", store.c_str(), dates);
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "failed: %s\n", cmd.c_str());
      return 1;
    }
  }
  wg::PipelineOptions o;
  o.healpix_level = 5;
  o.start_date = *wg::parse_yyyymmddhhmm("202001010000");
  o.end_date = o.start_date + int64_t(dates - 2) * 6 * 3600;
  o.seed = 1;
  wg::StreamOptions era5;
  era5.name = "ERA5";
  era5.type = wg::StreamType::Anemoi;
  era5.filenames = {store};
  era5.channels = {{}, {"w_", "skt", "tcw", "cp", "tp"}, {}, {"w_", "tcw", "cp", "tp"}};
  era5.tokens.token_size = 8;
  era5.tokens.tokenize_spacetime = true;

  const auto g0 = Clock::now();
  auto grid = std::make_shared<const wg::HealpixGrid>(o.healpix_level);
  const double grid_s = std::chrono::duration<double>(Clock::now() - g0).count();
  std::vector<wg::StreamInput> in{{era5, wg::open_stream_readers(era5, wg::pipeline_windows(o), o.seed)}};
  const auto& reader = dynamic_cast<const wg::AnemoiReader&>(*in[0].readers[0]);
  const wg::SampleBuilder builder(o, in, grid);
  const int64_t n = std::min<int64_t>(samples, builder.num_candidates());
  const int src = int(reader.source_channels().size()), tgt = int(reader.target_channels().size());

  // Warm the page cache: every window once.
  for (int64_t k = 0; k < builder.num_candidates(); ++k) (void)reader.target(builder.windows().window(k));

  const wg::zarr::Array data = wg::zarr::Group::open(store).array("data", 1);
  const int64_t nv = data.meta().shape[1], nc = data.meta().shape[3];
  std::vector<float> buf(size_t(nv * nc));
  const Stats zarr_read = time_each(int(n), [&](int i) { data.read({i, 0, 0, 0}, {1, nv, 1, nc}, buf.data()); });
  // The reader into one reused pair of PointSets (as a loader thread does).
  wg::PointSet source, target;
  const Stats read =
      time_each(int(n), [&](int i) { reader.read(builder.windows().window(builder.window_of(i)), &source, &target); });
  // The tokeniser on each window's points (read untimed just before).
  Stats tokenise;
  for (int64_t i = 0; i < n; ++i) {
    const wg::TimeWindow w = builder.windows().window(builder.window_of(i));
    reader.read(w, &source, &target);
    const wg::SampleKey key{o.seed, 0, uint64_t(i), 0};
    const Stats one = time_each(1, [&](int) {
      (void)wg::build_masking_sample(*grid, in[0].options.tokens, o.masking, o.masking.strategy, source, target,
                                     w.start, reader.spoof_means(), key);
    });
    tokenise.wall.push_back(one.wall[0]);
    tokenise.cpu.push_back(one.cpu[0]);
  }
  int64_t tokens = 0, targets = 0;
  const Stats fresh = time_each(int(n), [&](int i) { (void)builder.sample(i, 0); });
  wg::BuiltSample reused;  // as a loader thread keeps it
  const Stats full = time_each(int(n), [&](int i) {
    builder.sample(i, 0, reused);
    tokens += reused.streams[0].num_source_tokens();
    targets += reused.streams[0].targets[0].num_points();
  });

  // `threads` loader threads, each building every threads-th sample; off
  // OpenMP's binding of the first thread, as BatchLoader's workers are.
  std::atomic<int64_t> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      wg::unbind_side_thread("loader thread");
      wg::BuiltSample out;
      for (int64_t i; (i = next.fetch_add(1)) < 2 * n;) builder.sample(i, 1, out);
    });
  for (auto& t : pool) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double interval = wall / double(2 * n);  // seconds between samples delivered
  const double min_step = interval / 1.05;

  std::printf(
      "\nsample builder, ERA5-o96-sized anemoi store: %lld cells, %lld variables (%d source → %d features, %d "
      "targets), random masking, token_size 8, healpix_level 5, spacetime; %lld samples, page cache warm\n\n",
      (long long)nc, (long long)nv, src, src + 8, tgt, (long long)n);
  std::printf(
      "| phase (one thread) | mean wall ms | median wall ms | p90 wall ms | mean CPU ms |\n|---|---|---|---|---|\n");
  std::string json = "{\"cells\": " + std::to_string(nc) + ", \"variables\": " + std::to_string(nv) +
                     ", \"source_channels\": " + std::to_string(src) + ", \"target_channels\": " + std::to_string(tgt) +
                     ", \"samples\": " + std::to_string(n) + ", ";
  row("zarr read of one date (all variables)", zarr_read, json);
  row("reader: read + normalise (source and target)", read, json);
  row("build_masking_sample (tokens, mask, targets)", tokenise, json);
  row("SampleBuilder::sample, fresh BuiltSample", fresh, json);
  row("SampleBuilder::sample, reused BuiltSample", full, json);
  std::printf("\n%d loader threads: %lld samples in %.3f s: one sample every %.2f ms (%.1f samples/s)\n", threads,
              (long long)(2 * n), wall, interval * 1e3, 1.0 / interval);
  std::printf("data waiting stays under 5%% of a step (batch 1) for steps longer than %.1f ms\n", min_step * 1e3);
  std::printf("mean source tokens kept %.0f, target points %.0f; HealpixGrid(5) built once in %.1f ms\n",
              double(tokens) / double(n), double(targets) / double(n), grid_s * 1e3);
  char tail[512];
  std::snprintf(tail, sizeof tail,
                "\"threads\": %d, \"threaded_wall_s\": %.4f, \"threaded_samples\": %lld, \"interval_ms\": %.4f, "
                "\"min_step_ms_for_5pct_wait\": %.4f, \"grid_tables_ms\": %.2f}\n",
                threads, wall, (long long)(2 * n), interval * 1e3, min_step * 1e3, grid_s * 1e3);
  json += tail;
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  std::ofstream(out) << json;
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
