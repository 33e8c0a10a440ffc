#!/usr/bin/env bash
# bench/data_wait.sh [--build DIR] [--steps N] [--lat N] [--lon N]
#
# Share of step time spent waiting for data while training on an anemoi
# Zarr store, with loader_num_workers 0 (each step reads its own batch), 1
# and 2. The store (tests/data/make_anemoi_store.py) is bigger than the test
# fixture so that reading is not free: by default 64 x 128 cells, 20
# variables, 400 dates. wait share = sum(data_seconds) / sum(step_seconds)
# over every step but the first (metrics.jsonl with train_log_freq.metrics 1).
# Prints a table, writes BUILD/bench/data_wait.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build STEPS=60 LAT=64 LON=128
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --lat) LAT=$2; shift 2 ;;
    --lon) LON=$2; shift 2 ;;
    *) echo "data_wait.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
OUT=$BUILD/bench/data_wait
DATA=$OUT/data
mkdir -p "$OUT/streams" "$DATA"
STORE=$DATA/anemoi-bench-${LAT}x${LON}.zarr
[ -f "$STORE/.zgroup" ] || /usr/bin/python3 tests/data/make_anemoi_store.py "$STORE" --dates 400 --lat "$LAT" \
  --lon "$LON" --extra-variables 8 > /dev/null

cat > "$OUT/streams/era5.yml" <<YML
ERA5:
  type: anemoi
  filenames: ['$(basename "$STORE")']
  source_exclude: ['tp']
  target_exclude: ['q_']
  token_size: 32
  embed: {net: transformer, num_tokens: 1, num_heads: 4, dim_embed: 64, num_blocks: 2}
YML
BATCH=4
cat > "$OUT/overlay.yml" <<YML
streams_directory: streams/
start_date: 202001010000
end_date: 202003310000
batch_size_per_gpu: $BATCH
samples_per_mini_epoch: $((STEPS * BATCH))
num_mini_epochs: 1
lr_steps_warmup: 5
lr_steps_cooldown: 5
train_log_freq: {terminal: 1000, metrics: 1, checkpoint: 100000}
telemetry: {enabled: false}
YML

results=()
for workers in 0 1 2; do
  run_id=workers-$workers
  rm -rf "$OUT/runs/$run_id"
  "$BUILD/wgtrain" --config config/anemoi_fixture.yml --config "$OUT/overlay.yml" --data-path "$DATA" \
    --set run_root="$OUT/runs" --set run_id=$run_id --set loader_num_workers=$workers --log-level warn
  results+=("$workers:$OUT/runs/$run_id/metrics.jsonl")
done

/usr/bin/python3 - "$BUILD/bench/data_wait.json" "$STORE" "${results[@]}" <<'PY'
import json, sys
out, store, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for r in runs:
    workers, path = r.split(":", 1)
    steps = [json.loads(l) for l in open(path)][1:]  # the first step warms up
    wait = sum(s["data_seconds"] for s in steps)
    total = sum(s["step_seconds"] for s in steps)
    rows.append({"loader_num_workers": int(workers), "steps": len(steps), "step_ms": 1e3 * total / len(steps),
                 "wait_ms": 1e3 * wait / len(steps), "wait_share": wait / total,
                 "max_wait_ms": 1e3 * max(s["data_seconds"] for s in steps)})
print(f"store {store}")
print(f"{'workers':>7} {'steps':>5} {'step ms':>8} {'wait ms':>8} {'max wait ms':>11} {'wait share':>10}")
for r in rows:
    print(f"{r['loader_num_workers']:>7} {r['steps']:>5} {r['step_ms']:>8.1f} {r['wait_ms']:>8.2f} "
          f"{r['max_wait_ms']:>11.2f} {100 * r['wait_share']:>9.2f}%")
json.dump({"store": store, "rows": rows}, open(out, "w"), indent=1)
print(f"wrote {out}")
PY
