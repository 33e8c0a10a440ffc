#!/usr/bin/env bash
# Stop and exact resume with 2 ranks: run A trains uninterrupted; run B gets
# SIGUSR1 mid-run, stops at a step all ranks agree on, saves and exits 0;
# run again, B resumes from its checkpoint and finishes. B's loss curve, the
# two parts concatenated, equals A's exactly. A third start of B finds
# nothing left to do; a corrupt newest checkpoint is skipped and set aside,
# one that a single rank cannot read is skipped by all; resuming with
# another number of ranks is refused; a run whose
# checkpoints are all corrupt stops with an error instead of starting over.
#   tests/train/resume_test.sh WGTRAIN
set -euo pipefail
wgtrain=$1
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
epochs=40
steps=$((epochs * 10))  # cpu_tiny: 10 steps a mini-epoch (40 samples, 2 per rank and step, 2 ranks)
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do echo "---- $f"; tail -n 15 "$f"; done; exit 1; }
train() {  # run_id, log; with limit=S set, a run that hangs fails after S seconds; np=N ranks (2)
  ${limit:+timeout -k 10 "$limit"} mpirun -np "${np:-2}" --oversubscribe --bind-to none "$wgtrain" --config "$src/config/cpu_tiny.yml" \
    --set run_root="$tmp/runs" --set run_id="$1" --set num_mini_epochs=$epochs --set embed_dropout_rate=0.1 \
    --set train_log_freq.metrics=1 --set train_log_freq.terminal=100 --set train_log_freq.checkpoint=100 \
    --set telemetry.enabled=false > "$tmp/$2.log" 2>&1
}
curve() { /usr/bin/python3 -c 'import json,sys; [print(r["step"], r["loss"]) for r in map(json.loads, open(sys.argv[1]))]' "$1"; }

train A a || fail "uninterrupted run"
train B b1 &
pid=$!
# Signal once training is under way (a loaded machine starts slowly).
for _ in $(seq 600); do [[ $(wc -l < "$tmp/runs/B/metrics.jsonl" 2>/dev/null || echo 0) -ge 20 ]] && break; sleep 0.1; done
pkill -USR1 -f "run_id=B" || true
wait $pid || fail "stopped run exited non-zero"
grep -q "stopped at step" "$tmp/b1.log" || fail "run B was not stopped (finished too early?)"
stop=$(grep -oE "stopped at step [0-9]+" "$tmp/b1.log" | grep -oE "[0-9]+$")
echo "ok: run B stopped at step $stop, exit 0"
[[ -d "$tmp/runs/B/checkpoints/$(printf 'step_%010d' "$stop")" ]] || fail "no checkpoint for step $stop"
train B b2 || fail "resumed run"
grep -q "resuming from .* at step $stop" "$tmp/b2.log" || fail "run B did not resume at step $stop"
diff <(curve "$tmp/runs/A/metrics.jsonl") <(curve "$tmp/runs/B/metrics.jsonl") > "$tmp/diff.log" ||
  fail "resumed loss curve differs from the uninterrupted one: $(head -5 "$tmp/diff.log")"
echo "ok: loss curve of the stopped and resumed run equals the uninterrupted run's ($(wc -l < "$tmp/runs/A/metrics.jsonl") steps)"

train B b3 || fail "third start"
grep -q "summary: 0 steps" "$tmp/b3.log" || fail "a finished run trained again"
[[ $(cat "$tmp/runs/B/resumes") == 2 ]] || fail "the run's resumes count $(cat "$tmp/runs/B/resumes"), not 2"
echo "ok: a finished run has nothing left to do"

# kill -9 while checkpoints are being written (one every step, so the kill
# most likely lands in a write): the checkpoints left load, and the run
# resumes to the same curve.
mpirun -np 2 --oversubscribe --bind-to none "$wgtrain" --config "$src/config/cpu_tiny.yml" \
    --set run_root="$tmp/runs" --set run_id=C --set num_mini_epochs=$epochs --set embed_dropout_rate=0.1 \
    --set train_log_freq.metrics=1 --set train_log_freq.terminal=100 --set train_log_freq.checkpoint=1 \
    --set telemetry.enabled=false > "$tmp/c1.log" 2>&1 &
pid=$!
# up to 60 s: a loaded machine starts slowly; without two checkpoints the kill would test nothing
ready=0
for _ in $(seq 600); do
  [[ $(find "$tmp/runs/C/checkpoints" -maxdepth 1 -name 'step_*' 2>/dev/null | wc -l) -ge 2 ]] && { ready=1; break; }
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
[[ $ready == 1 ]] || { pkill -9 -f "run_id=C"; fail "run C wrote no two checkpoints in 60 s: $(tail -3 "$tmp/c1.log")"; }
sleep 0.7
pkill -9 -f "run_id=C" || true
wait $pid && fail "the killed run exited 0"
partial=$(find "$tmp/runs/C/checkpoints" -maxdepth 1 -name '*.tmp' | wc -l)
train C c2 || fail "resume after kill -9"
grep -q "resuming from .* at step" "$tmp/c2.log" || fail "no resume after kill -9"
# the killed run's last metrics lines may be past its last checkpoint: compare the resumed part
resumed_at=$(grep -oE "resuming from .* at step [0-9]+" "$tmp/c2.log" | grep -oE "[0-9]+$")
diff <(curve "$tmp/runs/A/metrics.jsonl" | awk -v s="$resumed_at" '$1 >= s') \
     <(curve "$tmp/runs/C/metrics.jsonl" | awk -v s="$resumed_at" '$1 >= s' | tail -n $((steps - resumed_at))) > "$tmp/diffc.log" ||
  fail "curve after resuming from a kill -9 differs: $(head -3 "$tmp/diffc.log")"
echo "ok: kill -9 during checkpointing ($partial partial checkpoint dir(s) left): resumed at step $resumed_at to the same curve"

# A corrupt newest checkpoint is skipped with a warning; an all-corrupt set is an error.
newest=$(find "$tmp/runs/B/checkpoints" -maxdepth 1 -regex '.*/step_[0-9]*' | sort | tail -1)
head -c 100 "$newest/state.safetensors" > "$tmp/cut" && mv "$tmp/cut" "$newest/state.safetensors"
train B b4 || fail "run with a corrupt newest checkpoint"
grep -q "skipping checkpoint $newest" "$tmp/b4.log" || fail "corrupt checkpoint not skipped"
# set aside (kept for a look), so that the steps the run writes now are not
# pruned as older than it
[[ -d $newest.unloadable ]] || fail "the corrupt checkpoint was not set aside as $newest.unloadable"
echo "ok: corrupt newest checkpoint skipped and set aside"
# A checkpoint that rank 1 alone cannot read (its generator state cut):
# every rank skips it together and resumes from the one before; none waits
# for another.
newest=$(find "$tmp/runs/B/checkpoints" -maxdepth 1 -regex '.*/step_[0-9]*' | sort | tail -1)  # not the one set aside
head -c 10 "$newest/rng_rank1.safetensors" > "$tmp/cut" && mv "$tmp/cut" "$newest/rng_rank1.safetensors"
limit=300 train B b4r || fail "run with a checkpoint rank 1 cannot read (exit $?; 124: it hung)"
grep -q "skipping checkpoint $newest: another rank could not load it" "$tmp/b4r.log" ||
  fail "rank 0 did not skip the checkpoint rank 1 could not read"
grep -q "resuming from .* at step" "$tmp/b4r.log" || fail "no resume from an older checkpoint"
echo "ok: a checkpoint one rank cannot read is skipped by every rank"
# Another number of ranks would give the step numbers another meaning: refused.
if np=1 train B b4w; then fail "a 2-rank run resumed with 1 rank"; fi
grep -q "was written by a run of 2 rank(s) with batch_size_per_gpu 2; this run has 1 and 2" "$tmp/b4w.log" ||
  fail "no clear error for resuming with another number of ranks"
echo "ok: resuming with another number of ranks is refused"
for d in "$tmp"/runs/B/checkpoints/step_*; do [[ -d $d ]] && echo garbage > "$d/state.safetensors"; done
if train B b5; then fail "all checkpoints corrupt, yet the run started"; fi
grep -q "none loads; refusing to train from scratch" "$tmp/b5.log" || fail "no clear error for all-corrupt checkpoints"
echo "ok: all checkpoints corrupt: clear error, no training from scratch"
echo "resume_test: all checks passed"
