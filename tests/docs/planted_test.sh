#!/usr/bin/env bash
# The cited-tests check can fail: on the project, with a Markdown file of
# planted citations added, it exits 1 and names each bad one (and none of
# the good ones); on a small tree of its own, a code comment citing a
# missing test of an existing suite fails, one of an unknown suite does not,
# and so does a row of docs/upstream-differences.md that cites no test.
#   tests/docs/planted_test.sh BUILD_DIR
set -euo pipefail
build=$1
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
check="$src/tests/docs/check_cited_tests.py"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out.log" 2>/dev/null; exit 1; }

cat > "$tmp/planted.md" <<'MD'
Good: `LeanOps.FusedLinearEqualsSeparateProducts`, `LeanLayers.*`, `TokenMasking.Healpix*`, `hpc.slurm_launch`,
`telemetry.address` (a config key), `config.yml` (a file).
Bad: `Masking.HealpixMasksWholeParentCells`, `LeanOps.NoSuchTest`, `LeanOps.NoSuch*`, `hpc.no_such_test`.
MD
rc=0
/usr/bin/python3 "$check" --root "$src" --build-dir "$build" --ctest "${CTEST:-ctest}" --extra "$tmp/planted.md" > "$tmp/out.log" 2>/dev/null || rc=$?
((rc == 1)) || fail "planted citations: exit $rc, not 1"
for bad in "Masking.HealpixMasksWholeParentCells\`: no test suite Masking" "LeanOps.NoSuchTest\`: no test LeanOps.NoSuchTest" \
           "LeanOps.NoSuch\*\`: no test of LeanOps starts with NoSuch" "hpc.no_such_test\`: ctest -N lists no such test"; do
  grep -q "planted.md:3: \`$bad" "$tmp/out.log" || fail "not reported: $bad"
done
(($(grep -c . "$tmp/out.log") == 4)) || fail "more than the 4 planted citations reported"
echo "ok: the 4 planted citations in Markdown reported, the 6 good ones not"

mkdir -p "$tmp/tree/tests" "$tmp/tree/src" "$tmp/tree/docs"
printf '| item | upstream | here | test |\n|---|---|---|---|\n| a | b | c | `Foo.BarBaz` |\n| d | e | f | none |\n' \
  > "$tmp/tree/docs/upstream-differences.md"
printf 'TEST(Foo, BarBaz) {}\n' > "$tmp/tree/tests/test_foo.cpp"
printf '// (Foo.BarBaz) passes, (Foo.BarQux) is missing, (Other.ThingHere) is not a suite here\n' > "$tmp/tree/src/a.cpp"
rc=0
/usr/bin/python3 "$check" --root "$tmp/tree" > "$tmp/out.log" 2>/dev/null || rc=$?
((rc == 1)) || fail "planted comment: exit $rc, not 1"
grep -q "src/a.cpp:1: Foo.BarQux: no test Foo.BarQux" "$tmp/out.log" || fail "the comment's missing test not reported"
grep -q "upstream-differences.md:4: a difference from upstream without a test" "$tmp/out.log" ||
  fail "the difference without a test not reported"
(($(grep -c . "$tmp/out.log") == 2)) || fail "more than the missing test and the untested difference reported"
echo "ok: a comment citing a missing test and a difference without a test reported; an existing test and an unknown suite not"
