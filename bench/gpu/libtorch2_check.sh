#!/usr/bin/env bash
# The build against a LibTorch 2.x, checked here, where no GPU and no
# LibTorch 2 is: bench/gpu/run.sh builds against the GPU machine's pip
# torch (2.11), which this machine cannot have, and Debian 12 has 1.13.
# Debian 13 (trixie) packages LibTorch 2.6 (CPU only, with the c10/cuda
# headers). This script fetches it and the libraries it runs on (about
# 100 packages, 150 MB, from deb.debian.org) into WORK, not into the
# system, and then:
#   1. compiles every file of the project that includes LibTorch against
#      2.6's headers with -fsyntax-only, WG_TORCH_CUDA defined (the CUDA
#      caching allocator's calls a CUDA LibTorch build takes);
#   2. builds wg_tests_model, wg_tests_train and wg_tests_interop against
#      2.6 (Release, WG_ONEDNN_SGEMM and the precompiled header off, as
#      run.sh builds), points them at trixie's loader and libraries
#      (patchelf), and runs them.
# Trixie's glibc, libstdc++ and libgomp serve the binaries; OpenMPI stays
# this machine's (trixie's libmpi.so.40 is set aside). Their BLAS is
# trixie's reference BLAS, so times mean nothing here. Nothing outside
# WORK changes. Needs curl, xz, dpkg and patchelf (apt-get install
# patchelf); not part of `make test`.
# About 30 minutes on 2 cores (the syntax check 10, a full build 13, the
# tests 6; a rerun builds again, as configuring rewrites the flags).
#   bench/gpu/libtorch2_check.sh [WORK]        (default /tmp/wg-libtorch2)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mkdir -p "${1:-/tmp/wg-libtorch2}" && cd "${1:-/tmp/wg-libtorch2}" && pwd)"
mirror=http://deb.debian.org/debian
suite=trixie
for tool in curl xz dpkg patchelf python3 cmake; do
  command -v $tool >/dev/null || { echo "libtorch2_check: $tool is missing (apt-get install $tool)" >&2; exit 1; }
done
log() { echo "== $(date +%H:%M:%S) $*"; }
mkdir -p "$work/debs" "$work/sys" "$work/hidden" "$work/log"

# 1. LibTorch 2.x from trixie, with the closure of its run-time dependencies.
log "the $suite package index"
curl -fsS -m 300 "$mirror/dists/$suite/main/binary-amd64/Packages.xz" | xz -dc > "$work/Packages"
python3 - "$work/Packages" > "$work/closure.txt" <<'PY'
import sys
packages, provides, cur = {}, {}, {}
for line in open(sys.argv[1], encoding="utf-8"):
    if line == "\n":
        if cur: packages.setdefault(cur["Package"], cur)
        cur = {}
    elif ":" in line and not line.startswith(" "):
        key, value = line.split(":", 1)
        cur[key] = value.strip()
if cur: packages.setdefault(cur["Package"], cur)
for name, p in packages.items():
    for v in p.get("Provides", "").split(","):
        v = v.strip().split(" ")[0]
        if v: provides.setdefault(v, name)
def deps(p):
    out = []
    for d in (p.get("Depends", "") + "," + p.get("Pre-Depends", "")).split(","):
        d = d.strip()
        if d: out.append(d.split("|")[0].strip().split(" ")[0].split(":")[0])  # the first alternative
    return out
runtime = [d for d in deps(packages["libtorch-dev"]) if d.startswith("libtorch")]
todo, seen = ["libtorch-dev", *runtime, "libc6", "libstdc++6", "libgomp1"], set()
skip = {"python3", "python3-dev", "libprotobuf-dev", "debconf", "dpkg", "perl-base", "install-info"}
while todo:
    name = todo.pop()
    if name in skip: continue
    name = name if name in packages else provides.get(name, "")
    if not name or name in seen: continue
    seen.add(name)
    todo += deps(packages[name])
for name in sorted(seen): print(packages[name]["Filename"])
PY
log "fetch $(wc -l < "$work/closure.txt") packages"
(cd "$work/debs" && while read -r f; do [[ -e "$(basename "$f")" ]] || echo "$mirror/$f"; done < "$work/closure.txt" |
  xargs -r -P4 -n8 curl -fsS -m 600 --remote-name-all)
for f in "$work"/debs/*.deb; do dpkg -x "$f" "$work/sys"; done
lib="$work/sys/usr/lib/x86_64-linux-gnu"
shopt -s nullglob
for f in "$lib"/libmpi*; do mv "$f" "$work/hidden/"; done
torch_so=$(ls "$lib"/libtorch.so.2.*.* | head -1)
version=${torch_so##*/libtorch.so.}
log "LibTorch $version in $work/sys"
# Generated in a CUDA build, absent from a CPU one; c10/cuda's headers include it.
mkdir -p "$work/extra/c10/cuda/impl"
echo '#define C10_CUDA_BUILD_SHARED_LIBS' > "$work/extra/c10/cuda/impl/cuda_cmake_macros.h"
inc="-isystem $work/extra -isystem $work/sys/usr/include -isystem $work/sys/usr/include/torch/csrc/api/include"

# 2. Every LibTorch file, compiled against 2.x's headers with WG_TORCH_CUDA.
log "configure $work/build (the compile commands of a Release build, as run.sh's)"
# No regeneration during the build: it would undo the edits of step 3 (a
# CMakeLists.txt changed while this runs built everything against 1.13).
cmake -S "$root" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_SUPPRESS_REGENERATION=ON -DWG_ONEDNN_SGEMM=OFF -DWG_PRECOMPILE_TORCH=OFF > "$work/log/configure.log" 2>&1
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include  # what a CUDA LibTorch's targets bring
[[ -e $cuda_inc/cuda_runtime_api.h ]] || { echo "libtorch2_check: no CUDA toolkit headers in $cuda_inc (CUDA_HOME)" >&2; exit 1; }
python3 - "$work/build/compile_commands.json" "$inc -isystem $cuda_inc -DWG_TORCH_CUDA" > "$work/syntax.sh" <<'PY'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if "torch/csrc/api/include" not in e["command"]: continue
    args, out, skip = shlex.split(e["command"]), [], False
    for a in args:
        if skip: skip = False; continue
        if a == "-o": skip = True; continue
        if a != "-c": out.append(a)
    cmd = [out[0], "-fsyntax-only", *shlex.split(sys.argv[2]), *out[1:]]
    print(f"cd {shlex.quote(e['directory'])} && {shlex.join(cmd)} || echo FAILED: {shlex.quote(e['file'])}")
PY
log "syntax check of $(wc -l < "$work/syntax.sh") files"
tr '\n' '\0' < "$work/syntax.sh" | xargs -0 -P2 -I{} bash -c '{}' > "$work/log/syntax.log" 2>&1 || true
failed=$(grep -c "^FAILED: " "$work/log/syntax.log" || true)
errors=$(grep -c "error:" "$work/log/syntax.log" || true)
log "syntax check: $errors errors, $failed files failed (log/syntax.log)"

# 3. The test binaries, built and linked against 2.x, run on trixie's libraries.
log "build against $version"
for f in $(find "$work/build" -name flags.make -o -name link.txt); do
  sed -i -e "s#-isystem /usr/include/torch/csrc/api/include#$inc#g" \
    -e "s#/usr/lib/x86_64-linux-gnu/libtorch.so.1[.0-9]*#$lib/libtorch.so.$version#g" \
    -e "s#/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1[.0-9]*#$lib/libtorch_cpu.so.$version#g" \
    -e "s#/usr/lib/x86_64-linux-gnu/libc10.so.1[.0-9]*#$lib/libc10.so.$version#g" \
    -e "s#/usr/lib/x86_64-linux-gnu/libc10.so #$lib/libc10.so.$version #g" "$f"
done
for f in $(find "$work/build" -name link.txt); do sed -i 's#^/usr/bin/c++ #/usr/bin/c++ -Wl,--allow-shlib-undefined #' "$f"; done
bins=(wg_tests_model wg_tests_train wg_tests_interop)
# The tests' discovery runs each binary with this machine's loader, which
# cannot load 2.x's libraries, and make then deletes the binary: link again.
make -C "$work/build" -k -j2 "${bins[@]}" > "$work/log/build.log" 2>&1 || true
if grep -q "error:" "$work/log/build.log"; then grep "error:" "$work/log/build.log" | head -20; exit 1; fi
runpath="/usr/lib/x86_64-linux-gnu/openmpi/lib:$lib:$lib/blas:$lib/lapack:/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib"
loader=""
for l in "$work"/sys/usr/lib64/ld-linux-x86-64.so.2 "$work"/sys/lib64/ld-linux-x86-64.so.2; do [[ -n $loader || ! -e $l ]] || loader=$l; done
[[ -n $loader ]] || { echo "libtorch2_check: no ld-linux-x86-64.so.2 in $work/sys" >&2; exit 1; }
rc=0
for b in "${bins[@]}"; do
  (cd "$work/build/tests" && bash "CMakeFiles/$b.dir/link.txt")
  patchelf --set-interpreter "$loader" --force-rpath --set-rpath "$runpath" "$work/build/tests/$b"
  log "run $b"
  (cd "$work/build/tests" && OMP_NUM_THREADS=2 "./$b" > "$work/log/$b.log" 2>&1) || rc=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]" "$work/log/$b.log" || true
  grep -E "^\[  FAILED  \] [A-Z]" "$work/log/$b.log" || true
done
[[ $errors == 0 && $failed == 0 ]] || rc=1
log "done (rc $rc; logs in $work/log)"
exit $rc
