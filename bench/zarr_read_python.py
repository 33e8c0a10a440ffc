#!/usr/bin/env python3
"""Python zarr's read throughput on the same store and the same reading
pattern as bench/zarr_read.cpp (the C++ reader): whole dates of `data`
(`z[d]`, one chunk = one date), in the same shuffled orders, each date once
per pass, N threads of a ThreadPoolExecutor each taking the next date from a
shared iterator (numcodecs releases the GIL around blosc).

Configurations:
- "python": numcodecs.blosc.set_nthreads(1), reads in the pool's threads
  (also at N=1), so blosc itself adds no threads: like the C++ reader.
- "python_default": numcodecs as it comes (blosc nthreads = min(8, cores)).
  numcodecs uses blosc's own threads only when called from the main thread,
  so at N=1 the loop runs on the main thread (what a plain `for d in order:
  z[d]` does) and blosc splits each chunk over its threads; at N>1 the pool
  threads decode with one blosc thread each.

One process = one round: with --cold, one cold pass per N for "python"
(chunk files evicted from the page cache first); one untimed warm-up pass
that also computes the checksum (must equal the C++ one); then --passes timed
passes per configuration and N. One JSON object per line on stdout.

Usage: zarr_read_python.py --store S.zarr [--threads N ...] [--passes P] [--seed S] [--cold]
"""
import argparse
import concurrent.futures as cf
import json
import os
import sys
import time

import numcodecs
import numcodecs.blosc
import numpy as np
import zarr

MASK = (1 << 64) - 1


def shuffled_dates(n, seed):
    """Fisher-Yates driven by splitmix64(seed): the permutation bench/zarr_read.cpp computes."""
    order = list(range(n))
    state = seed & MASK
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        j = z % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def date_checksum(a, d, weights):
    """sum_i bits[i] * (d * n + i + 1) mod 2^64 over date d's float32 bit patterns (as in the C++)."""
    bits = np.ascontiguousarray(a).view(np.uint32).ravel().astype(np.uint64)
    return int(np.sum(bits * (weights + np.uint64(d * bits.size)), dtype=np.uint64))


def evict(array_dir):
    for name in os.listdir(array_dir):
        if name.startswith("."):
            continue
        fd = os.open(os.path.join(array_dir, name), os.O_RDONLY)
        try:
            os.fdatasync(fd)  # dirty pages (a store just written) are not dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def run_pass(z, order, threads, pool, main_thread=False, on_date=None):
    """Reads every date of `order` once; returns (wall seconds, process CPU seconds)."""
    it = iter(order)  # list_iterator.__next__ is atomic under the GIL: a shared counter

    def worker():
        for d in it:
            a = z[d]
            if on_date is not None:
                on_date(d, a)

    t0, c0 = time.perf_counter(), time.process_time()
    if main_thread:
        worker()
    else:
        for f in [pool.submit(worker) for _ in range(threads)]:
            f.result()
    return time.perf_counter() - t0, time.process_time() - c0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True)
    ap.add_argument("--array", default="data")
    ap.add_argument("--threads", type=int, action="append")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--cold", action="store_true")
    a = ap.parse_args()
    thread_counts = a.threads or [1, 2]

    default_nthreads = numcodecs.blosc.get_nthreads()
    z = zarr.open_group(a.store, mode="r")[a.array]
    dates, variables, _, cells = z.shape
    pass_bytes = float(dates * variables * cells * z.dtype.itemsize)
    mb = pass_bytes / 1e6
    array_dir = os.path.join(a.store, a.array)
    base = {"impl": "python", "dates": dates, "variables": variables, "cells": cells, "pass_bytes": pass_bytes,
            "zarr": zarr.__version__, "numcodecs": numcodecs.__version__}
    pool = cf.ThreadPoolExecutor(max_workers=max(thread_counts + [2]))

    numcodecs.blosc.set_nthreads(1)
    if a.cold:
        for t in thread_counts:
            evict(array_dir)
            s, cpu = run_pass(z, shuffled_dates(dates, a.seed), t, pool)
            print(json.dumps({**base, "kind": "cold", "config": "python", "threads": t, "passes": 1,
                              "seconds": s, "cpu_seconds": cpu, "mb_per_s": mb / s}), flush=True)

    # Warm-up pass (untimed for the results): page cache, imports, and the checksum.
    sums = {}
    weights = np.arange(1, variables * cells + 1, dtype=np.uint64)
    warm_s, _ = run_pass(z, shuffled_dates(dates, a.seed), min(max(thread_counts), 2), pool,
                      on_date=lambda d, arr: sums.__setitem__(d, date_checksum(arr, d, weights)))
    checksum = sum(sums.values()) & MASK
    print(json.dumps({**base, "kind": "checksum", "checksum": f"0x{checksum:016x}", "warmup_seconds": warm_s}),
          flush=True)

    for config, nthreads in (("python", 1), ("python_default", default_nthreads)):
        numcodecs.blosc.set_nthreads(nthreads)
        for t in thread_counts:
            main_thread = config == "python_default" and t == 1
            runs = [run_pass(z, shuffled_dates(dates, a.seed + 1 + p), t, pool, main_thread=main_thread)
                    for p in range(a.passes)]
            each = [w for w, _ in runs]
            total, cpu = sum(each), sum(c for _, c in runs)
            print(json.dumps({**base, "kind": "warm", "config": config, "threads": t, "passes": a.passes,
                              "blosc_nthreads": nthreads, "main_thread": main_thread, "seconds": total,
                              "cpu_seconds": cpu, "pass_seconds": each, "mb_per_s": mb * a.passes / total,
                              "mb_per_cpu_s": mb * a.passes / cpu}), flush=True)
            print(f"{config} {t} thread(s): {a.passes} pass(es) of {mb:.1f} MB in {total:.3f} s = "
                  f"{mb * a.passes / total:.0f} MB/s", file=sys.stderr)
    print(f"python checksum 0x{checksum:016x}", file=sys.stderr)
    pool.shutdown()


if __name__ == "__main__":
    sys.exit(main())
