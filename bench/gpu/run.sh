#!/usr/bin/env bash
# The GPU check, one script for a machine with an NVIDIA GPU and a CUDA
# PyTorch (the device tool's H100 or H200: nvcc, CMake, ninja, python3 with torch
# and NCCL from pip; no network). It
#   1. unpacks the Debian packages bench/gpu/fetch_deps.sh put in .gpu_deps/
#      (carried) into /, never overwriting a file the machine has;
#   2. builds against that PyTorch's LibTorch and pip's NCCL (build-gpu/);
#   3. runs the CUDA tests: attention cores on CUDA against the CPU kernel,
#      a bf16 step (caching allocator's reserved >= allocated, recomputation
#      = none), the 1-rank NCCL communicator, a checkpoint holding the GPU's
#      generator state;
#   4. trains the default model (config/gpu_bench.yml: upstream's
#      default_config, healpix_level 5, an ERA5-shaped stream) with wgtrain
#      itself (loader threads, metrics) in the modes of --trainer-modes
#      (default: none): median step time, peak reserved memory, MFU (model
#      FLOPs against the GPU's bf16 data-sheet peak, src/util/peak_flops.cpp),
#      as a table and JSON in $OUT (or build-gpu/out);
#   5. runs the same model against its PyTorch twin on the same GPU
#      (bench_vs_pytorch --device cuda: the same weights and batch on both
#      sides, bf16 autocast on both, the twin's attention through torch's
#      scaled_dot_product_attention): step time, the step's and the reserved
#      peaks, and MFU per mode, as a table (vs_twin.log) and vs_twin_gpu.json.
# At most 8 files come back from $OUT: it gets 7.
# Where there is no GPU it says so and exits 0. Aimed at 8 minutes on an H200
# (its sm_90 build runs on an H100 as well).
#   bench/gpu/run.sh [--no-build] [--modes none,selective,full] [--trainer-modes none] [--steps N]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${OUT:-$root/build-gpu/out}"
modes="none,selective,full"
trainer_modes="none"
steps=6
build=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-build) build=0 ;;
    --modes) modes="$2"; shift ;;
    --trainer-modes) trainer_modes="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    -h|--help) sed -n '2,/^#   bench\/gpu\/run.sh/p' "$0"; exit 0 ;;
    *) echo "bench/gpu/run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
py=python3
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1 ||
   ! $py -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  echo "no GPU: no NVIDIA GPU with a CUDA PyTorch here; nothing to check (bench/gpu/run.sh)"
  exit 0
fi
mkdir -p "$out"
log() { echo "[gpu $(date +%H:%M:%S)] $*"; }
nvidia-smi -L
t_start=$(date +%s)

# 1. the carried Debian packages
if [[ -d .gpu_deps ]]; then
  stage=/tmp/gpu_deps
  rm -rf "$stage"; mkdir -p "$stage"
  for f in .gpu_deps/*.deb; do dpkg -x "$f" "$stage"; done
  cp -rn "$stage"/. / 2>/dev/null || true   # -n: what the machine has stays
  # dpkg -x runs no maintainer scripts: make the links update-alternatives would.
  for tool in mpirun mpiexec mpicc mpicxx mpic++; do
    [[ -e /usr/bin/$tool || ! -e /usr/bin/$tool.openmpi ]] || ln -s "$tool.openmpi" "/usr/bin/$tool"
  done
  ldconfig
  log "unpacked $(ls .gpu_deps/*.deb | wc -l) packages"
else
  log "no .gpu_deps/: the build needs the machine's own copies of the libraries (bench/gpu/fetch_deps.sh)"
fi

# 2. build
torch_prefix=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
nccl_dir=$($py -c 'import nvidia.nccl as n, os; print(list(n.__path__)[0])' 2>/dev/null || true)
nccl_args=()
if [[ -n "$nccl_dir" && -d "$nccl_dir/include" ]]; then
  nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -1)
  nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$nccl_lib")
  export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
fi
if [[ $build == 1 ]]; then
  log "configure (LibTorch: $torch_prefix; NCCL: ${nccl_dir:-toolkit})"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DWG_ONEDNN_SGEMM=OFF -DWG_PRECOMPILE_TORCH=OFF "${nccl_args[@]}" > "$out/build.log" 2>&1 ||
    { tail -40 "$out/build.log"; echo "configure failed (full log: $out/build.log)"; exit 1; }
  log "build"
  cmake --build build-gpu -j "$(nproc)" --target wgtrain wg_tests_model wg_tests_dist >> "$out/build.log" 2>&1 ||
    { grep -E "error|Error" "$out/build.log" | head -40; echo "build failed (full log: $out/build.log)"; exit 1; }
  # apart: a benchmark that does not build costs step 5 only
  cmake --build build-gpu -j "$(nproc)" --target bench_vs_pytorch >> "$out/build.log" 2>&1 ||
    { grep -E "error|Error" "$out/build.log" | tail -20; echo "bench_vs_pytorch did not build: step 5 is left out"; }
fi

# 3. the CUDA tests
rc=0
# What this LibTorch brings that the CPU kernels bind to (never seen here):
# the OpenMP runtime(s) loaded, and whether libtorch_cpu exports a BLAS
# sgemm_ (pip's torch links MKL statically; the CPU attention kernel and
# AttentionCore.* need sgemm_ and dgemm_ by name, wg/util/blas.h).
torch_lib=$($py -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
log "OpenMP runtimes: $(ldd build-gpu/tests/wg_tests_model 2>/dev/null | grep -Eo '[^ ]*(gomp|iomp|libomp)[^ ]*' | sort -u | tr '\n' ' ')"
log "sgemm_/dgemm_ exported by libtorch_cpu: $(nm -D --defined-only "$torch_lib/libtorch_cpu.so" 2>/dev/null | grep -cwE 'sgemm_|dgemm_')"
log "tests"
build-gpu/tests/wg_tests_model --gtest_filter='Gpu.*:AttentionCore.*:Flops.*' 2>&1 | tee "$out/tests_model.log" | tail -25 ||
  true
grep -q "FAILED" "$out/tests_model.log" && rc=1
grep -q "SKIPPED" "$out/tests_model.log" && { echo "a GPU test skipped on a GPU machine"; rc=1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
mpirun -np 1 build-gpu/tests/wg_tests_dist --gtest_filter='DataParallel.Nccl*:DataParallel.Gpu*' > "$out/tests_nccl.log" 2>&1 || rc=1
tail -5 "$out/tests_nccl.log"
grep -q "SKIPPED" "$out/tests_nccl.log" && { echo "the NCCL test skipped: this build has no NCCL"; rc=1; }

# 4. the benchmark: one short run per mode (steps after the first two are timed)
log "wgtrain: $trainer_modes, $steps steps each"
IFS=, read -ra mode_list <<< "$trainer_modes"
: > "$out/bench_wgtrain.log"
for m in "${mode_list[@]}"; do
  rm -rf "build-gpu/bench_runs/$m"
  sections=()
  for s in embed ae_local ae_adapter ae_aggregation ae_global forecast pred; do
    sections+=(--set "gradient_checkpointing.$s=$m")
  done
  mode_log="build-gpu/bench_runs/$m.log"
  mkdir -p build-gpu/bench_runs
  timeout 150 build-gpu/wgtrain --config config/gpu_bench.yml --set run_root=build-gpu/bench_runs --set run_id="$m" \
    "${sections[@]}" --set samples_per_mini_epoch="$steps" > "$mode_log" 2>&1 ||
    { echo "mode $m failed:"; tail -15 "$mode_log"; rc=1; }
  { echo "==== mode $m"; cat "$mode_log"; } >> "$out/bench_wgtrain.log"
done
$py - "$out" "${mode_list[@]}" <<'PY'
import json, statistics, sys
out, modes = sys.argv[1], sys.argv[2:]
rows = []
for m in modes:
    try:
        recs = [json.loads(l) for l in open(f"build-gpu/bench_runs/{m}/metrics.jsonl")]
    except OSError:
        continue
    timed = recs[2:] or recs
    rows.append({"mode": m, "steps_timed": len(timed),
                 "step_seconds_median": statistics.median(r["step_seconds"] for r in timed),
                 "peak_reserved_bytes": max(r["peak_reserved_bytes"] for r in recs),
                 "peak_allocated_bytes": max(r["peak_bytes"] for r in recs),
                 "model_flops_per_step": statistics.median(r["model_flops"] for r in timed),
                 "mfu_median": statistics.median((r["mfu"] or 0) for r in timed)})
print(f"{'mode':10s} {'step s':>8s} {'reserved GiB':>13s} {'alloc GiB':>10s} {'TFLOP/step':>11s} {'MFU':>6s}")
for r in rows:
    print(f"{r['mode']:10s} {r['step_seconds_median']:8.3f} {r['peak_reserved_bytes'] / 2**30:13.2f} "
          f"{r['peak_allocated_bytes'] / 2**30:10.2f} {r['model_flops_per_step'] / 1e12:11.2f} {100 * r['mfu_median']:5.1f}%")
json.dump({"benchmark": "gpu step per recomputation mode", "config": "config/gpu_bench.yml", "modes": rows},
          open(f"{out}/gpu_bench.json", "w"), indent=2)
PY

# 5. against the twin on the same GPU: the same weights and batch (one step
#    dump) on both sides; its dumps (weights, gradients: gigabytes) stay in
#    build-gpu/vs_twin, the table and JSON go to $out.
log "against the PyTorch twin: $modes"
rm -rf build-gpu/vs_twin
if [[ ! -x build-gpu/bench_vs_pytorch ]]; then
  echo "no build-gpu/bench_vs_pytorch: the comparison with the twin did not run"; rc=1
else
  timeout 300 build-gpu/bench_vs_pytorch --config config/gpu_bench.yml --device cuda --python "$(command -v $py)" \
    --modes "$modes" --rounds 1 --warmup 2 --steps 4 --batches 1 --profiled-steps 1 --parity-steps 2 \
    --threads "$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))" --no-plot --no-activation-peaks \
    --out build-gpu/vs_twin/vs_twin_gpu.json \
    > "$out/vs_twin.log" 2>&1 || { echo "against the twin failed:"; rc=1; }
  tail -22 "$out/vs_twin.log"
  cp build-gpu/vs_twin/vs_twin_gpu.json "$out/" 2>/dev/null || true
fi
log "done in $(( $(date +%s) - t_start )) s, results in $out"
exit $rc
