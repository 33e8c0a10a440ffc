#!/usr/bin/env bash
# Weak scaling of data-parallel training on this machine: 1 rank vs 2 ranks,
# 1 thread per rank, the same batch per rank, for several gradient bucket
# sizes. As a reference for what the machine itself allows, two independent
# 1-rank runs at the same time (no communication at all): their combined
# throughput is the ceiling for 2 ranks here. Prints a table and writes
# bench/results/data_parallel.json.
#   bench/data_parallel.sh [extra bench_data_parallel options, e.g. --set batch_size_per_gpu=8]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bench_data_parallel}
BUCKETS=(0.25 1 4 25)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
mkdir -p bench/results
args=()
for b in "${BUCKETS[@]}"; do args+=(--bucket-mb "$b"); done
{
  for round in 1 2; do  # alternate, so drifts of the machine hit both
    mpirun -np 1 --bind-to none "$BIN" "${args[@]}" --set num_threads=1 "$@" | sed "s/^{/{\"round\": $round, /"
    mpirun -np 2 --bind-to none --oversubscribe "$BIN" "${args[@]}" --set num_threads=1 "$@" | sed "s/^{/{\"round\": $round, /"
    mpirun -np 1 --bind-to none "$BIN" --set num_threads=1 "$@" | sed "s/^{/{\"round\": $round, \"pair\": 1, /" &
    mpirun -np 1 --bind-to none "$BIN" --set num_threads=1 "$@" | sed "s/^{/{\"round\": $round, \"pair\": 2, /"
    wait
  done
} > bench/results/data_parallel.jsonl
/usr/bin/python3 - <<'PY'
import json, statistics
rows = [json.loads(l) for l in open("bench/results/data_parallel.jsonl") if l.startswith("{")]
alone = [r for r in rows if "pair" not in r]
def med(key, src=alone, **sel):
    return statistics.median([r[key] for r in src if all(r[k] == x for k, x in sel.items())])
one = med("samples_per_second", ranks=1)
pairs = [r for r in rows if "pair" in r]
ceiling = sum(med("samples_per_second", src=pairs, pair=p) for p in (1, 2))
out = {"benchmark": "data_parallel", "one_rank_samples_per_second": one,
       "two_independent_runs_samples_per_second": ceiling, "buckets": []}
print(f"1 rank alone: {one:.1f} samples/s; two independent 1-rank runs at once: {ceiling:.1f} samples/s "
      f"together ({ceiling / (2 * one):.3f} of 2x: the machine's own ceiling for 2 ranks)")
print(f"{'bucket MiB':>10} {'buckets':>8} {'step ms':>8} {'samples/s':>10} {'efficiency':>10} {'vs ceiling':>10} {'allreduce ms':>12} {'exposed ms':>10} {'hidden':>7}")
for b in sorted({r["bucket_mb"] for r in rows}):
    two = med("samples_per_second", ranks=2, bucket_mb=b)
    step = med("step_seconds_median", ranks=2, bucket_mb=b)
    ar = med("allreduce_seconds_per_step", ranks=2, bucket_mb=b)
    ex = med("exposed_seconds_per_step", ranks=2, bucket_mb=b)
    nb = [r["buckets"] for r in rows if r["ranks"] == 2 and r["bucket_mb"] == b][0]
    eff = two / (2 * one)
    hidden = 1 - ex / ar if ar > 0 else float("nan")
    print(f"{b:>10g} {nb:>8d} {step*1e3:>8.1f} {two:>10.1f} {eff:>10.3f} {two / ceiling:>10.3f} {ar*1e3:>12.2f} {ex*1e3:>10.2f} {hidden:>7.2f}")
    out["buckets"].append({"bucket_mb": b, "buckets": nb, "two_rank_step_seconds": step, "two_rank_samples_per_second": two,
                           "weak_scaling_efficiency": eff, "vs_independent_runs": two / ceiling,
                           "allreduce_seconds_per_step": ar,
                           "exposed_seconds_per_step": ex, "hidden_share": hidden})
json.dump(out, open("bench/results/data_parallel.json", "w"), indent=2)
print("wrote bench/results/data_parallel.json")
PY
