#!/usr/bin/env bash
# expect.sh CODE REGEX COMMAND...: runs COMMAND, passes when it exits with
# CODE and its whole output (stdout+stderr, colour codes removed) matches the
# extended REGEX; `.` also matches newlines, so a pattern can span lines.
set -u
want_code=$1 regex=$2
shift 2
out=$("$@" 2>&1)
code=$?
out=$(printf '%s' "$out" | sed 's/\x1b\[[0-9;]*m//g')
if [ "$code" -ne "$want_code" ]; then
  printf 'exit code %s, expected %s\n--- output ---\n%s\n' "$code" "$want_code" "$out"
  exit 1
fi
if ! [[ $out =~ $regex ]]; then
  printf 'output does not match /%s/\n--- output ---\n%s\n' "$regex" "$out"
  exit 1
fi
echo "ok: exit $code, output matches /$regex/"
