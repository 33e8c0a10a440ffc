#!/usr/bin/env bash
# bench/cpu_setup.sh [--build DIR] [--rounds R] [--threads T] [--samples N]
#
# Training steps/s of the same binary and configuration under three CPU
# set-ups, each adding one change to the one before:
#   before     OpenBLAS's pthread build, matrix products on one thread (a
#              pthread pool nested in LibTorch's oversubscribes), freed
#              memory returned to the system (cpu_keep_freed_mib 0)
#   omp-blas   OpenBLAS's OpenMP build (what scripts/setup.sh installs):
#              matrix products on the rank's threads, sharing LibTorch's pool
#   keep-mem   and freed memory kept for the next step (cpu_keep_freed_mib
#              1024, the default): no page faults to take it back
# The BLAS build is picked per process with LD_LIBRARY_PATH; minor page
# faults and the process's peak RSS come from /usr/bin/time.
# Configurations: config/cpu_small.yml (synthetic stream, 1.46 M parameters)
# and config/cpu_mixed.yml (upstream's ERA5 + NPP-ATMS + SYNOP stream files
# on the fixture stores, 7.5 M parameters), --threads intra-op threads
# (default 2). The set-ups alternate within each round (ratios, since these
# machines are noisy). Prints a table, writes BUILD/bench/cpu_setup.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build ROUNDS=2 THREADS=2 SAMPLES=40
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    *) echo "cpu_setup.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
LIBDIR=/usr/lib/x86_64-linux-gnu
for b in pthread openmp; do
  [ -f "$LIBDIR/openblas-$b/libblas.so.3" ] || { echo "cpu_setup.sh: needs libopenblas0-$b (apt-get install libopenblas0-$b)" >&2; exit 2; }
done
make -s mixed-fixture BUILD_DIR="$BUILD" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv
for round in $(seq 1 "$ROUNDS"); do
  for cfg in cpu_small cpu_mixed; do
    for setup in before:pthread:0 omp-blas:openmp:0 keep-mem:openmp:1024; do
      IFS=: read -r name blas keep <<<"$setup"
      log=$work/$cfg-$name-$round.log
      WG_DATA_PATH=$PWD/$BUILD/data/mixed LD_LIBRARY_PATH=$LIBDIR/openblas-$blas OMP_NUM_THREADS=$THREADS \
        /usr/bin/time -f "time: minor faults %R, max rss %M KB" \
        "$BUILD/wgtrain" --config "config/$cfg.yml" --set num_threads="$THREADS" --set run_root="$work/runs" \
        --set num_mini_epochs=1 --set samples_per_mini_epoch="$SAMPLES" --set telemetry.enabled=false \
        --set train_log_freq.checkpoint=100000 --set cpu_keep_freed_mib="$keep" >"$log" 2>&1
      kind=$(sed -n 's/.*(BLAS: \([a-z-]*\), \([0-9]*\) thread.*/\1 \2/p' "$log")
      sum=$(sed -n 's/.*summary: \([0-9]*\) steps in \([0-9.]*\) s, loss \([0-9.]*\) (first logged) -> \([0-9.]*\).*peak memory \([0-9.]*\) MiB.*/\1 \2 \4 \5/p' "$log")
      faults=$(sed -n 's/^time: minor faults \([0-9]*\), max rss \([0-9]*\) KB/\1 \2/p' "$log")
      [ -n "$kind" ] && [ -n "$sum" ] && [ -n "$faults" ] || { cat "$log"; echo "cpu_setup.sh: no summary ($cfg, $name)" >&2; exit 1; }
      echo "$cfg $name $round $kind $sum $faults" >>"$results"
    done
  done
done
/usr/bin/python3 - "$results" "$BUILD/bench/cpu_setup.json" "$THREADS" <<'PY'
import json, os, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
setups = ["before", "omp-blas", "keep-mem"]
out = {"threads": int(sys.argv[3]), "configs": {}}
print(f"{'config':10} {'set-up':9} {'BLAS':17} {'thr':>3} {'steps':>5} {'s per round':>12} {'steps/s':>8} "
      f"{'vs before':>9} {'faults':>8} {'rss MiB':>8} {'last loss':>9}")
for cfg in ["cpu_small", "cpu_mixed"]:
    per = {}
    for name in setups:
        r = [x for x in rows if x[0] == cfg and x[1] == name]
        secs = [float(x[6]) for x in r]
        steps = int(r[0][5])
        per[name] = {"blas": r[0][3], "blas_threads": int(r[0][4]), "steps": steps, "seconds": secs,
                     "steps_per_s": steps / statistics.median(secs), "last_loss": [x[7] for x in r],
                     "peak_tensor_mib": float(r[0][8]), "minor_faults": [int(x[9]) for x in r],
                     "max_rss_mib": [int(x[10]) / 1024 for x in r]}
    for name in setups:
        p = per[name]
        p["speedup_vs_before"] = p["steps_per_s"] / per["before"]["steps_per_s"]
        print(f"{cfg:10} {name:9} {p['blas']:17} {p['blas_threads']:>3} {p['steps']:>5} "
              f"{' '.join(f'{s:.1f}' for s in p['seconds']):>12} {p['steps_per_s']:>8.2f} "
              f"{p['speedup_vs_before']:>8.2f}x {statistics.median(p['minor_faults']):>8.0f} "
              f"{statistics.median(p['max_rss_mib']):>8.0f} {p['last_loss'][0]:>9}")
    same = len({tuple(per[n]["last_loss"]) for n in setups}) == 1
    print(f"{cfg:10} last logged losses {'equal in every set-up' if same else 'DIFFER between set-ups'}")
    out["configs"][cfg] = {**per, "losses_equal": same}
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(f"wrote {sys.argv[2]}")
PY
