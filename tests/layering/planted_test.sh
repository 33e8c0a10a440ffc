#!/usr/bin/env bash
# The include-order check can fail: on a copy of src/ and include/ with one
# planted back-reference (io including the trainer), it exits 1 and names
# the file and line; on the copy without it, it passes.
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
check="$src/tests/layering/check_includes.py"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -r "$src/src" "$src/include" "$tmp/"
/usr/bin/python3 "$check" --root "$tmp" > "$tmp/clean.log" || { echo "FAIL: the clean copy does not pass"; cat "$tmp/clean.log"; exit 1; }
printf '#include "wg/train/trainer.h"\n' >> "$tmp/src/io/safetensors.cpp"
if /usr/bin/python3 "$check" --root "$tmp" > "$tmp/planted.log"; then
  echo "FAIL: the planted back-reference passed"; cat "$tmp/planted.log"; exit 1
fi
grep -q "src/io/safetensors.cpp:[0-9]*: io includes wg/train/trainer.h (train)" "$tmp/planted.log" ||
  { echo "FAIL: the report does not name the planted include"; cat "$tmp/planted.log"; exit 1; }
echo "ok: planted back-reference reported: $(head -1 "$tmp/planted.log")"
