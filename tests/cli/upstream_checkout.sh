#!/usr/bin/env bash
# A WeatherGenerator user's config files, as they are: from the root of a
# checkout laid out as upstream's (config/default_config.yml and
# config/mixed.yml verbatim from upstream at e3b29bee, in
# tests/cli/wg_checkout/; config/streams/ from this repository's copies of
# upstream's stream files), with fixture stores under a data root, wgtrain
#   --config config/default_config.yml                          (ERA5)
#   --config config/default_config.yml --config config/mixed.yml (ERA5, NPP-ATMS, SYNOP)
# scaled to CPU size with --set, must train; warn once, listing upstream's
# not-used keys; and write a config.yml that shows every upstream key.
# Usage: upstream_checkout.sh WGTRAIN SOURCE_DIR
set -euo pipefail
wgtrain=$1 src=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cp -r "$src/tests/cli/wg_checkout/config" "$root/config"
mkdir -p "$root/config/streams" "$root/data"
cp -r "$src/config/streams/era5_1deg" "$src/config/streams/era5_nppatms_synop" "$root/config/streams/"
py=/usr/bin/python3
$py "$src/tests/data/make_anemoi_grid_store.py" "$root/data/aifs-ea-an-oper-0001-mars-o96-1979-2023-6h-v8.zarr" \
  --grid 16 --dates 28 >/dev/null
$py "$src/tests/data/make_obs_store.py" "$root/data/observations-ea-ofb-0001-2012-2023-npp-atms-radiances-v2.zarr" \
  --kind atms --hours 168 >/dev/null
$py "$src/tests/data/make_obs_store.py" "$root/data/observations-ea-ofb-0001-1979-2023-combined-surface-v2.zarr" \
  --kind synop --hours 168 >/dev/null
cpu=(healpix_level=2 ae_local_dim_embed=128 ae_local_num_blocks=1 ae_local_num_heads=4 ae_adapter_num_heads=4
     ae_adapter_embed=16 ae_global_dim_embed=64 ae_global_num_blocks=1 ae_global_num_heads=4
     ae_aggregation_num_blocks=1 ae_aggregation_num_heads=4 with_mixed_precision=false device=cpu
     num_mini_epochs=1 samples_per_mini_epoch=2 start_date=202001010000 end_date=202001070000
     start_date_val=202001050000 end_date_val=202001070000 samples_per_validation=2
     loader_num_workers=0 telemetry.enabled=false run_root=runs)
sets=()
for s in "${cpu[@]}"; do sets+=(--set "$s"); done
cd "$root"

fail() { echo "FAIL: $*"; exit 1; }
upstream_keys=$($py -c '
import sys, yaml
print(" ".join(yaml.safe_load(open(sys.argv[1]))))' config/default_config.yml)

run() {  # run_id, then --config files
  local id=$1; shift
  local configs=()
  for c in "$@"; do configs+=(--config "$c"); done
  echo "== wgtrain ${configs[*]} (run $id)"
  if ! "$wgtrain" "${configs[@]}" --data-path data "${sets[@]}" --set run_id="$id" >"$id.log" 2>&1; then
    cat "$id.log"; fail "run $id did not train"
  fi
  grep -E "summary: [0-9]+ steps" "$id.log" || fail "no summary line"
  [ "$(grep -c "of WeatherGenerator's keys are accepted and not used here" "$id.log")" = 1 ] || fail "not one not-used warning"
  for k in compile_model with_fsdp freeze_modules nn_module wgtags desc run_history; do
    grep -q "accepted and not used here.*[ ,]$k\b" "$id.log" || fail "the warning does not list $k"
  done
  grep -q "streams_directory ./config/streams/.*relative to the working directory" "$id.log" || fail "no path rule logged"
  local cfg=runs/$id/config.yml
  for k in $upstream_keys; do grep -q "^$k:" "$cfg" || fail "$cfg lacks upstream's key $k"; done
  grep -q "^compile_model: False  # config/default_config.yml:[0-9]* (not used)" "$cfg" || fail "compile_model not marked"
  [ -f "runs/$id/${id}_latest.chkpt" ] && [ -f "runs/$id/model_${id}_latest.json" ] || fail "no upstream model files"
  echo "ok: trained; the warning lists the not-used keys; $cfg shows all $(wc -w <<<"$upstream_keys") upstream keys"
}

run up-default config/default_config.yml
grep -q "^# ERA5:" runs/up-default/config.yml || fail "stream ERA5 not loaded"
run up-mixed config/default_config.yml config/mixed.yml
grep -q "streams_mixed does not exist; using .*era5_nppatms_synop" up-mixed.log || fail "renamed streams directory not followed"
for s in ERA5 NPPATMS SurfaceCombined; do
  grep -q "^# $s:" runs/up-mixed/config.yml || fail "stream $s not loaded"
done
# Continuing from a run's saved configuration and weights, as upstream's
# --from_run_id: the JSON's streams and settings, the .chkpt's tensors.
echo "== wgtrain --config runs/up-mixed/model_up-mixed_latest.json --init-weights runs/up-mixed"
if ! "$wgtrain" --config runs/up-mixed/model_up-mixed_latest.json --init-weights runs/up-mixed --data-path data \
     >cont.log 2>&1; then
  cat cont.log; fail "the continued run did not train"
fi
grep -qE "initialised [0-9]+ tensors from runs/up-mixed/up-mixed_latest.chkpt" cont.log || { cat cont.log; fail "weights"; }
grep -qE "summary: [0-9]+ steps" cont.log || fail "no summary line"
[ "$(grep -c "^# \(ERA5\|NPPATMS\|SurfaceCombined\):" "$(ls -d runs/*/ | grep -v up- | head -1)config.yml")" = 3 ] ||
  fail "the continued run does not have the three streams"
echo "ok: continued from the saved configuration and weights"
# A typo in an upstream key is still an error, with the right hint.
if "$wgtrain" --config config/default_config.yml --data-path data --set ae_local_num_block=3 --print-plan >typo.log 2>&1; then
  fail "a typo was accepted"
fi
grep -q "unknown key 'ae_local_num_block' (did you mean 'ae_local_num_blocks'?)" typo.log || { cat typo.log; fail "wrong hint"; }
echo "upstream checkout: all passed"
