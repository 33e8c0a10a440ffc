#!/usr/bin/env bash
# bench/data_wait.sh [--build DIR] [--steps N] [--level L] [--threads T] [--workers "0 1 2"]
#
# Share of step time spent waiting for data at the ERA5-o96 sample size:
# one ERA5 stream as upstream's config/streams/era5_1deg/era5.yml (79 source
# channels, token_size 8, masking_rate 0.6, every masked point a target) on
# an anemoi store on the O96 grid (40,320 points, ERA5 v8's 101 variables,
# tests/data/make_anemoi_grid_store.py), with a CPU-sized model
# (config/cpu_mixed.yml's widths, the stream's embed and coordinate
# embedding 64 wide instead of 256, HEALPix level 4 instead of upstream's 5:
# a dense global engine over 12,288 cells and upstream's widths take
# minutes and 18 GB a step on CPU), batch 1, with loader_num_workers 0
# (each step builds its own batch), 1 and 2. The data side is upstream's
# ERA5 sample; the level changes only the cell count of the tokeniser.
# wait share = sum(data_seconds) / sum(step_seconds) over every step but the
# first (metrics.jsonl with train_log_freq.metrics 1). Compute runs on
# --threads threads (default 1, leaving the second core of these machines
# to the loader). Prints a table, writes BUILD/bench/data_wait.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build STEPS=16 LEVEL=4 THREADS=1 WORKERS="0 1 2"
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --level) LEVEL=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    *) echo "data_wait.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
OUT=$BUILD/bench/data_wait
DATA=$OUT/data
mkdir -p "$OUT/streams" "$DATA"
STORE=$DATA/era5-o96-bench.zarr
DATES=$((STEPS + 8))
[ -f "$STORE/.done-$DATES" ] || {
  rm -rf "$STORE"
  /usr/bin/python3 tests/data/make_anemoi_grid_store.py "$STORE" --grid 96 --dates "$DATES" > /dev/null
  touch "$STORE/.done-$DATES"
}

sed -e "s|filenames : \[.*\]|filenames : ['$(basename "$STORE")']|" -e "s|dim_embed : 256|dim_embed : 64|" \
  -e "s|num_heads : 8|num_heads : 4|" config/streams/era5_1deg/era5.yml > "$OUT/streams/era5.yml"
grep -q "$(basename "$STORE")" "$OUT/streams/era5.yml"

cat > "$OUT/overlay.yml" <<YML
streams_directory: streams/
healpix_level: $LEVEL
start_date: 202001010000
end_date: 202001$(printf %02d $((1 + (DATES - 4) / 4)))0000
batch_size_per_gpu: 1
samples_per_mini_epoch: $STEPS
num_mini_epochs: 1
num_threads: $THREADS
lr_steps_warmup: 4
lr_steps_cooldown: 4
train_log_freq: {terminal: 1000, metrics: 1, checkpoint: 100000}
telemetry: {enabled: false}
YML

results=()
for workers in $WORKERS; do
  run_id=workers-$workers
  rm -rf "$OUT/runs/$run_id"
  "$BUILD/wgtrain" --config config/cpu_mixed.yml --config "$OUT/overlay.yml" --data-path "$DATA" \
    --set run_root="$OUT/runs" --set run_id=$run_id --set loader_num_workers=$workers --log-level warn
  results+=("$workers:$OUT/runs/$run_id/metrics.jsonl")
done

/usr/bin/python3 - "$BUILD/bench/data_wait.json" "$STORE" "$LEVEL" "$THREADS" "${results[@]}" <<'PY'
import json, sys
out, store, level, threads, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
rows = []
for r in runs:
    workers, path = r.split(":", 1)
    steps = [json.loads(l) for l in open(path)][1:]  # the first step warms up
    wait = sum(s["data_seconds"] for s in steps)
    total = sum(s["step_seconds"] for s in steps)
    rows.append({"loader_num_workers": int(workers), "steps": len(steps), "step_ms": 1e3 * total / len(steps),
                 "wait_ms": 1e3 * wait / len(steps), "wait_share": wait / total,
                 "max_wait_ms": 1e3 * max(s["data_seconds"] for s in steps)})
print(f"store {store} (O96, 40,320 points), healpix_level {level}, {threads} compute thread(s)")
print(f"{'workers':>7} {'steps':>5} {'step ms':>8} {'wait ms':>8} {'max wait ms':>11} {'wait share':>10}")
for r in rows:
    print(f"{r['loader_num_workers']:>7} {r['steps']:>5} {r['step_ms']:>8.1f} {r['wait_ms']:>8.2f} "
          f"{r['max_wait_ms']:>11.2f} {100 * r['wait_share']:>9.2f}%")
json.dump({"store": store, "grid": "O96", "points": 40320, "healpix_level": level, "compute_threads": threads,
           "rows": rows}, open(out, "w"), indent=1)
print(f"wrote {out}")
PY
