// Read throughput of the C++ Zarr reader (wg::zarr, wg_core, no LibTorch),
// read the way training reads: whole dates of `data` (one chunk = one date,
// all variables, all cells), in a shuffled order, each date once per pass.
// N reader threads each take the next date from a shared atomic counter and
// read it with Array::read into their own buffer (cache_chunks 2,
// blosc_threads 1). bench/zarr_read_python.py does the same with Python
// zarr; bench/zarr_read.sh runs both in alternating rounds and compares.
//
// One process = one round:
//   1. with --cold: for each thread count, the store's chunk files are
//      evicted from the page cache (posix_fadvise DONTNEED), then one pass;
//   2. one untimed warm-up pass (2 threads at most), which also computes the
//      checksum of every date (must equal Python's);
//   3. for each thread count, --passes timed passes (pass p in the order of
//      seed + p; the same orders as the Python script).
// Prints one JSON object per line on stdout (the driver collects them) and a
// short summary on stderr.
//   build/bench_zarr_read --store S.zarr [--threads N]... [--passes P] [--seed S] [--cold]
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "wg/io/zarr.h"

namespace {

using Clock = std::chrono::steady_clock;

// splitmix64, as in zarr_read_python.py.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Fisher-Yates over 0..n-1 driven by splitmix64(seed): the Python script
// computes the same permutation.
std::vector<int64_t> shuffled_dates(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[next_random(state) % static_cast<uint64_t>(i + 1)]);
  return order;
}

// Position-weighted sum of the float32 bit patterns of date d (n words):
// sum_i bits[i] * (d * n + i + 1) mod 2^64. Summed over dates (mod 2^64) it
// does not depend on the order dates are read in, and Python computes the
// same number with numpy's wrapping uint64 arithmetic.
uint64_t date_checksum(const float* values, int64_t n, int64_t d) {
  uint64_t sum = 0, weight = static_cast<uint64_t>(d) * static_cast<uint64_t>(n) + 1;
  for (int64_t i = 0; i < n; ++i, ++weight) {
    uint32_t bits;
    std::memcpy(&bits, values + i, 4);
    sum += bits * weight;
  }
  return sum;
}

// Drops the data chunk files from the page cache (no root needed).
void evict(const std::string& array_dir) {
  for (const auto& e : std::filesystem::directory_iterator(array_dir)) {
    if (!e.is_regular_file() || e.path().filename().string().front() == '.') continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);  // dirty pages (a store just written) are not dropped
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

struct Reader {
  wg::zarr::Array array;
  int64_t dates, variables, cells;
  int64_t date_elements() const { return variables * cells; }
  double pass_bytes() const { return static_cast<double>(dates) * static_cast<double>(date_elements()) * 4.0; }
};

struct Timing {
  double wall = 0, cpu = 0;  // seconds; cpu: the whole process's CPU time (all threads, user + system)
};

double cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Reads every date of `order` once with `threads` threads.
// With `checksums` (the untimed warm-up pass), also fills checksums[d].
Timing run_pass(const Reader& r, const std::vector<int64_t>& order, int threads,
                std::vector<std::vector<float>>& buffers, std::vector<uint64_t>* checksums = nullptr) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto work = [&](int t) {
    try {
      float* buf = buffers[t].data();
      for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < order.size();) {
        const int64_t d = order[k];
        r.array.read({d, 0, 0, 0}, {1, r.variables, 1, r.cells}, buf);
        if (checksums) (*checksums)[d] = date_checksum(buf, r.date_elements(), d);
      }
    } catch (...) {
      if (!failed.exchange(true)) error = std::current_exception();
    }
  };
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  const Timing t{std::chrono::duration<double>(Clock::now() - t0).count(), cpu_seconds() - c0};
  if (error) std::rethrow_exception(error);
  return t;
}

std::string hex64(uint64_t v) {
  char s[19];
  std::snprintf(s, sizeof s, "0x%016llx", static_cast<unsigned long long>(v));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using json = nlohmann::json;
  try {
    CLI::App app{"Zarr read throughput of one anemoi-like array, per thread count", "bench_zarr_read"};
    std::string store, name = "data";
    std::vector<int> thread_counts;
    int passes = 5;
    uint64_t seed = 1234;
    bool cold = false;
    app.add_option("--store", store, "the Zarr store")->required()->type_name("PATH");
    app.add_option("--threads", thread_counts, "reader threads (repeatable; default 1 and 2)")->allow_extra_args(false);
    app.add_option("--passes", passes, "passes over the dates")->capture_default_str();
    app.add_option("--seed", seed, "shuffles the date order")->capture_default_str();
    app.add_option("--array", name, "the array to read")->capture_default_str();
    app.add_flag("--cold", cold, "drop the page cache before each pass (root)");
    wg::bench::parse_or_exit(app, argc, argv);
    if (thread_counts.empty()) thread_counts = {1, 2};

    const wg::zarr::Group group = wg::zarr::Group::open(store);
    Reader r{group.array(name, /*cache_chunks=*/2, /*blosc_threads=*/1), 0, 0, 0};
    const auto& m = r.array.meta();
    if (m.shape.size() != 4 || m.dtype != wg::zarr::DType::F4 || m.shape[2] != 1 || m.chunks[0] != 1 ||
        m.chunks[1] != m.shape[1] || m.chunks[3] != m.shape[3])
      throw std::runtime_error(r.array.path() + ": expected float32 [dates, variables, 1, cells] chunked one date per chunk");
    r.dates = m.shape[0];
    r.variables = m.shape[1];
    r.cells = m.shape[3];
    const int max_threads = *std::max_element(thread_counts.begin(), thread_counts.end());
    std::vector<std::vector<float>> buffers(std::max(max_threads, 2),
                                            std::vector<float>(static_cast<size_t>(r.date_elements()), 1.0f));
    const double mb = r.pass_bytes() / 1e6;
    const json base = {{"impl", "cpp"},       {"dates", r.dates}, {"variables", r.variables},
                       {"cells", r.cells},    {"pass_bytes", r.pass_bytes()},
                       {"chunk_bytes", m.chunk_bytes()}};

    if (cold)
      for (int t : thread_counts) {
        evict(r.array.path());
        const Timing s = run_pass(r, shuffled_dates(r.dates, seed), t, buffers);
        json row = base;
        row.update({{"kind", "cold"}, {"config", "cpp"}, {"threads", t}, {"passes", 1}, {"seconds", s.wall},
                    {"cpu_seconds", s.cpu}, {"mb_per_s", mb / s.wall}});
        std::cout << row.dump() << std::endl;
      }

    // Warm-up pass (untimed for the results): page cache, buffers, and the checksum.
    std::vector<uint64_t> sums(static_cast<size_t>(r.dates), 0);
    const double warm_s = run_pass(r, shuffled_dates(r.dates, seed), std::min(max_threads, 2), buffers, &sums).wall;
    uint64_t checksum = 0;
    for (uint64_t s : sums) checksum += s;
    json check = base;
    check.update({{"kind", "checksum"}, {"checksum", hex64(checksum)}, {"warmup_seconds", warm_s}});
    std::cout << check.dump() << std::endl;

    for (int t : thread_counts) {
      double total = 0, cpu = 0;
      std::vector<double> each;
      for (int p = 0; p < passes; ++p) {
        const Timing s = run_pass(r, shuffled_dates(r.dates, seed + 1 + p), t, buffers);
        each.push_back(s.wall);
        total += s.wall;
        cpu += s.cpu;
      }
      json row = base;
      row.update({{"kind", "warm"}, {"config", "cpp"}, {"threads", t}, {"passes", passes}, {"seconds", total},
                  {"cpu_seconds", cpu}, {"pass_seconds", each}, {"mb_per_s", mb * passes / total},
                  {"mb_per_cpu_s", mb * passes / cpu}});
      std::cout << row.dump() << std::endl;
      std::fprintf(stderr, "cpp %d thread(s): %d pass(es) of %.1f MB in %.3f s = %.0f MB/s\n", t, passes, mb, total,
                   mb * passes / total);
    }
    std::fprintf(stderr, "cpp checksum %s\n", hex64(checksum).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_zarr_read: %s\n", e.what());
    return 1;
  }
}
