#!/usr/bin/env bash
# The C++ model against the PyTorch twin (tests/reference/, written from the
# spec): wgtrain --dump-step writes one training step (batch, weights,
# tables, every section's output, predictions, loss, gradients), the twin
# runs the same step and compares every tensor. In float64 each element
# must agree within 1e-9 of itself plus 1e-10 of its tensor's largest
# magnitude; in float32 (the run's precision) within 1e-5 of itself plus
# 2e-4 of that. Gradients that are sums cancelling to small values differ
# from the exact (float64) step by up to ~6e-5 of their tensor's scale when
# summed in another order, and the two sides can err in opposite
# directions: on an Intel Xeon with AVX-512 (2026-12-03) the embed's last
# read-out bias gradient was 5.8e-5 of its scale off the float64 step in
# C++ and 1.12e-4 off the twin's float32 one, where an AMD EPYC's BLAS
# kept both within 1e-4.
# Usage: twin_check.sh WGTRAIN
set -euo pipefail
wgtrain=$1
here=$(cd "$(dirname "$0")" && pwd)
twin=$here/../reference/wg_twin.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cfg=$here/configs/twin.yml

check() {  # name, then --set overrides; the step in float64 (tight) and as run, in float32
  local name=$1; shift
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  echo "== $name, float64"
  "$wgtrain" --config "$cfg" "${sets[@]}" --set run_root="$work/runs" --log-level warn \
    --dump-step "$work/$name.f64.safetensors" --dump-step-dtype f64
  /usr/bin/python3 "$twin" check "$work/$name.f64.safetensors" --threads 2 --show 3 --rtol 1e-9 --atol-rel 1e-10
  echo "== $name, float32"
  "$wgtrain" --config "$cfg" "${sets[@]}" --set run_root="$work/runs" --log-level warn --dump-step "$work/$name.safetensors"
  /usr/bin/python3 "$twin" check "$work/$name.safetensors" --threads 2 --show 3 --rtol 1e-5 --atol-rel 2e-4
}

check masking_b2
check masking_b1_qk_off batch_size_per_gpu=1 ae_local_with_qk_lnorm=false ae_adapter_with_residual=false \
  pred_self_attention=false pred_mlp_adaln=false
check two_queries_local_blocks ae_local_num_queries=2 ae_global_att_dense_rate=0.5 ae_global_block_factor=16 \
  ae_global_num_blocks=3 masking_strategy=healpix masking_strategy_config.hl_mask=0
check forecast training_mode=forecast forecast_policy=fixed forecast_steps=2 forecast_offset=1 fe_num_blocks=3 \
  forecast_att_dense_rate=0.5
# Weights both ways, by state_dict name with no mapping: the twin loads the
# C++ model's weights (a dump's params.*, strict load_state_dict), shifts
# them and saves its own state_dict; wgtrain --init-weights takes that file,
# and its next dump must hold exactly the twin's tensors (and pass the check).
echo "== weights: C++ -> twin -> C++"
"$wgtrain" --config "$cfg" --set run_root="$work/runs" --log-level warn --dump-step "$work/w0.safetensors"
/usr/bin/python3 "$twin" export-weights "$work/w0.safetensors" "$work/twin_weights.safetensors"
"$wgtrain" --config "$cfg" --set run_root="$work/runs" --log-level warn --init-weights "$work/twin_weights.safetensors" \
  --dump-step "$work/w1.safetensors"
/usr/bin/python3 -c '
import sys
sys.path.insert(0, sys.argv[1])
import safetensors_io as st
twin, _ = st.read(sys.argv[2]); before, _ = st.read(sys.argv[3]); after, _ = st.read(sys.argv[4])
p_after = {k[len("params."):]: v for k, v in after.items() if k.startswith("params.")}
p_before = {k[len("params."):]: v for k, v in before.items() if k.startswith("params.")}
assert list(p_after) == list(twin), "names or order differ: %s" % (set(p_after) ^ set(twin))
bad = [k for k in twin if not (p_after[k].dtype == twin[k].dtype and p_after[k].shape == twin[k].shape and (p_after[k] == twin[k]).all())]
assert not bad, "not loaded bit for bit: %s" % bad[:5]
changed = sum(1 for k in twin if not (p_before[k] == twin[k]).all())
assert changed > len(twin) // 2, "the twin did not change the weights (%d of %d)" % (changed, len(twin))
print("weights round trip: %d tensors, the C++ model holds the twin'"'"'s exactly (%d changed by the twin)" % (len(twin), changed))
' "$here/../reference" "$work/twin_weights.safetensors" "$work/w0.safetensors" "$work/w1.safetensors"
/usr/bin/python3 "$twin" check "$work/w1.safetensors" --threads 2 --show 3 --rtol 1e-5 --atol-rel 2e-4
# The same both ways as WeatherGenerator's .chkpt: the twin torch.saves its
# state_dict, wgtrain loads it (its dump holds those tensors exactly and
# passes the check: the same forward output as the twin's); a short wgtrain
# run writes {run_id}_latest.chkpt, which the twin loads with
# torch.load(weights_only=True) and load_state_dict(strict=True), and which
# holds the run's weights.safetensors bit for bit.
echo "== weights as .chkpt: twin (torch.save) -> C++ -> twin (torch.load)"
/usr/bin/python3 "$twin" export-weights "$work/w0.safetensors" "$work/twin_weights.chkpt"
"$wgtrain" --config "$cfg" --set run_root="$work/runs" --log-level warn --init-weights "$work/twin_weights.chkpt" \
  --dump-step "$work/w2.safetensors"
/usr/bin/python3 -c '
import sys, torch
sys.path.insert(0, sys.argv[1])
import safetensors_io as st
sd = torch.load(sys.argv[2], weights_only=True)
after, _ = st.read(sys.argv[3])
p = {k[len("params."):]: v for k, v in after.items() if k.startswith("params.")}
assert list(p) == list(sd), "names or order differ: %s" % (set(p) ^ set(sd))
bad = [k for k in sd if not (p[k].dtype == sd[k].dtype and p[k].shape == sd[k].shape and (p[k] == sd[k]).all())]
assert not bad, "not loaded bit for bit: %s" % bad[:5]
print(".chkpt from torch.save: %d tensors, the C++ model holds them exactly" % len(sd))
' "$here/../reference" "$work/twin_weights.chkpt" "$work/w2.safetensors"
/usr/bin/python3 "$twin" check "$work/w2.safetensors" --threads 2 --show 3 --rtol 1e-5 --atol-rel 2e-4
"$wgtrain" --config "$cfg" --set run_root="$work/runs" --set run_id=chkpt --set samples_per_mini_epoch=4 \
  --log-level warn --init-weights "$work/twin_weights.chkpt"
/usr/bin/python3 "$twin" load-chkpt "$work/runs/chkpt/chkpt_latest.chkpt" "$work/w0.safetensors"
/usr/bin/python3 -c '
import sys, torch
sys.path.insert(0, sys.argv[1])
import safetensors_io as st
sd = torch.load(sys.argv[2], weights_only=True); own, _ = st.read(sys.argv[3])
assert list(sd) == list(own) and all((sd[k] == own[k]).all() for k in sd), "the .chkpt differs from weights.safetensors"
print("wgtrain .chkpt: %d tensors, equal to the run'"'"'s weights.safetensors" % len(sd))
' "$here/../reference" "$work/runs/chkpt/chkpt_latest.chkpt" "$work/runs/chkpt/weights.safetensors"
echo "twin check: all passed"
