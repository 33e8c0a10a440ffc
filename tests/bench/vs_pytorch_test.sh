#!/usr/bin/env bash
# bench_vs_pytorch runs end to end on cpu_tiny (both sides, a step or two
# per mode) and writes the JSON that docs/benchmarks.md and
# bench/plot_vs_pytorch.py read. Nothing here is timed: it checks that the
# two sides trained the same model (the loss-parity run without dropout),
# that every mode was measured on both sides, that the twin recomputed the
# pieces C++ did, and that the activation peaks are ordered as the modes
# promise (full < selective < none); then that bad options end with exit 2
# and one line.
# Usage: vs_pytorch_test.sh BENCH_VS_PYTORCH
set -euo pipefail
bench=$1
src="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bench" --config "$src/config/cpu_tiny.yml" --modes none,full,selective --rounds 1 --warmup 1 --steps 1 \
  --profiled-steps 1 --parity-steps 2 --threads 1 --no-plot --out "$work/vs.json" > "$work/vs.log" 2>&1 ||
  { cat "$work/vs.log"; echo "FAIL: bench_vs_pytorch exited non-zero"; exit 1; }
/usr/bin/python3 - "$work/vs.json" <<'PY' || { cat "$work/vs.log"; exit 1; }
import json, math, sys
doc = json.load(open(sys.argv[1]))
def check(ok, what):
    if not ok:
        print("FAIL:", what)
        sys.exit(1)
parity = doc["loss_parity"]
check(parity is not None and parity["max_relative_difference"] < 1e-5,
      f"loss parity without dropout: {parity}")
modes = {m["mode"]: m for m in doc["modes"]}
check(sorted(modes) == ["full", "none", "selective"], f"modes {sorted(modes)}")
for name, m in modes.items():
    for key in ["cpp_step_seconds_median", "torch_step_seconds_median", "cpp_step_peak_bytes",
                "torch_step_peak_bytes", "cpp_activation_peak_bytes", "cpp_model_flops_per_second"]:
        check(isinstance(m[key], (int, float)) and m[key] > 0 and math.isfinite(m[key]), f"{name}: {key} = {m[key]}")
    check(m["cpp_activation_forward_end_bytes"] <= m["cpp_activation_peak_bytes"], f"{name}: forward end above the peak")
check(modes["full"]["recomputed_pieces_match"], "full: the twin recomputed other pieces")
check(modes["none"]["pieces_recomputed"] == 0 and modes["full"]["pieces_recomputed"] == modes["full"]["pieces_total"],
      "pieces recomputed in none / full")
act = {n: modes[n]["cpp_activation_peak_bytes"] for n in modes}
check(act["full"] < act["selective"] < act["none"], f"activation peaks {act}")
cost = doc["cpp_cost_against_none"]
check(set(cost) == {"full", "selective"} and all(c["activation_peak_cut_from_none"] > 0 for c in cost.values()),
      f"cost against none {cost}")
check(len(doc["sgemm_flops_per_second"]) == 2 and min(doc["sgemm_flops_per_second"]) > 0, "sgemm reference rate")
print("ok: both sides ran none, full and selective; loss parity", parity["max_relative_difference"],
      "; activation peaks", act)
PY

# Bad options: exit 2, one clear line, nothing run.
expect_usage_error() {  # expected text, then the options
  local want=$1; shift
  local rc=0
  "$bench" "$@" > "$work/err.log" 2>&1 || rc=$?
  [[ $rc == 2 ]] || { cat "$work/err.log"; echo "FAIL: $* exited $rc, not 2"; exit 1; }
  grep -q -- "$want" "$work/err.log" || { cat "$work/err.log"; echo "FAIL: $*: no '$want'"; exit 1; }
}
expect_usage_error "--modes config runs on the C++ side only" --modes config
expect_usage_error "must be >= 1" --steps 0
expect_usage_error "--modes" --modes fastest
expect_usage_error "cpu_tiny_missing.yml" --config "$work/cpu_tiny_missing.yml" --side cpp --modes none
echo "ok: bad options end with exit 2 and one line"
