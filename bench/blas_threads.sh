#!/usr/bin/env bash
# bench/blas_threads.sh [--build DIR] [--rounds R] [--threads T] [--samples N]
#
# Training steps/s with OpenBLAS's OpenMP build (matrix products on every
# thread of the rank, sharing LibTorch's OpenMP pool: what scripts/setup.sh
# installs) against its pthread build (matrix products on one thread, as
# before: a pthread pool nested in LibTorch's oversubscribes), the same
# binary and configuration, picked per process with LD_LIBRARY_PATH.
# Configurations: config/cpu_small.yml (synthetic stream, 1.46 M parameters)
# and config/cpu_mixed.yml (upstream's ERA5 + NPP-ATMS + SYNOP stream files
# on the fixture stores, 7.5 M parameters), --threads intra-op threads
# (default 2). The builds alternate within each round (ratios, since these
# machines are noisy). Prints a table, writes BUILD/bench/blas_threads.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build ROUNDS=2 THREADS=2 SAMPLES=40
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    *) echo "blas_threads.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
LIBDIR=/usr/lib/x86_64-linux-gnu
for b in pthread openmp; do
  [ -f "$LIBDIR/openblas-$b/libblas.so.3" ] || { echo "blas_threads.sh: needs libopenblas0-$b (apt-get install libopenblas0-$b)" >&2; exit 2; }
done
make -s mixed-fixture BUILD_DIR="$BUILD" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv
for round in $(seq 1 "$ROUNDS"); do
  for cfg in cpu_small cpu_mixed; do
    for blas in pthread openmp; do
      log=$work/$cfg-$blas-$round.log
      WG_DATA_PATH=$PWD/$BUILD/data/mixed LD_LIBRARY_PATH=$LIBDIR/openblas-$blas OMP_NUM_THREADS=$THREADS \
        "$BUILD/wgtrain" --config "config/$cfg.yml" --set num_threads="$THREADS" --set run_root="$work/runs" \
        --set num_mini_epochs=1 --set samples_per_mini_epoch="$SAMPLES" --set telemetry.enabled=false \
        --set train_log_freq.checkpoint=100000 >"$log" 2>&1
      kind=$(sed -n 's/.*(BLAS: \([a-z-]*\), \([0-9]*\) thread.*/\1 \2/p' "$log")
      sum=$(sed -n 's/.*summary: \([0-9]*\) steps in \([0-9.]*\) s, loss \([0-9.]*\) (first logged) -> \([0-9.]*\).*peak memory \([0-9.]*\) MiB.*/\1 \2 \4 \5/p' "$log")
      [ -n "$kind" ] && [ -n "$sum" ] || { cat "$log"; echo "blas_threads.sh: no summary ($cfg, $blas)" >&2; exit 1; }
      echo "$cfg $blas $round $kind $sum" >>"$results"
    done
  done
done
/usr/bin/python3 - "$results" "$BUILD/bench/blas_threads.json" "$THREADS" <<'PY'
import json, os, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
out = {"threads": int(sys.argv[3]), "configs": {}}
print(f"{'config':10} {'BLAS':18} {'BLAS threads':>12} {'steps':>5} {'s (per round)':>22} {'steps/s':>8} {'last loss':>10}")
for cfg in ["cpu_small", "cpu_mixed"]:
    per = {}
    for blas in ["pthread", "openmp"]:
        r = [x for x in rows if x[0] == cfg and x[1] == blas]
        secs = [float(x[6]) for x in r]
        steps = int(r[0][5])
        per[blas] = {"blas": r[0][3], "blas_threads": int(r[0][4]), "steps": steps, "seconds": secs,
                     "steps_per_s": steps / statistics.median(secs), "last_loss": [x[7] for x in r],
                     "peak_mib": float(r[0][8])}
        p = per[blas]
        print(f"{cfg:10} {p['blas']:18} {p['blas_threads']:>12} {steps:>5} {' '.join(f'{s:.1f}' for s in secs):>22} "
              f"{p['steps_per_s']:>8.2f} {r[0][7]:>10}")
    ratio = per["openmp"]["steps_per_s"] / per["pthread"]["steps_per_s"]
    same = per["openmp"]["last_loss"] == per["pthread"]["last_loss"]
    print(f"{cfg:10} openmp / pthread steps/s: {ratio:.2f}x; last logged losses {'equal' if same else 'DIFFER'}")
    out["configs"][cfg] = {**per, "speedup": ratio, "losses_equal": same}
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(f"wrote {sys.argv[2]}")
PY
