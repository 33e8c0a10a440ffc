#!/usr/bin/env bash
# Downloads, here (Debian 12, packages reachable), the Debian packages this
# project builds against that the GPU machine lacks (it has CUDA, PyTorch,
# CMake and ninja, no network): yaml-cpp, spdlog/fmt, nlohmann-json, CLI11,
# HEALPix C++, blosc, prometheus-cpp/civetweb, GoogleTest and OpenMPI, with
# their library dependencies, into .gpu_deps/ (ignored by git through
# .git/info/exclude). bench/gpu/run.sh unpacks them there without
# overwriting anything the machine has. Pass `.gpu_deps` in the device
# tool's carry list (the working tree and carried paths travel up to 64 MiB).
#   bench/gpu/fetch_deps.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="$root/.gpu_deps"
grep -qx '/.gpu_deps/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu_deps/' >> "$root/.git/info/exclude"
mkdir -p "$dir"
# Exactly these (no recursion: a recursive list pulls in compilers and
# reaches 390 MB): the -dev packages the build reads, the libraries they
# link, and OpenMPI's runtime; what every base image has (libc, libstdc++,
# zlib, zstd, lz4, curl) is left out.
pkgs=(libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev
      libhealpix-cxx-dev libhealpix-cxx3 libcfitsio10 libsharp0 libblosc-dev libblosc1 libsnappy1v5
      prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
      libcivetweb-dev libcivetweb1 civetweb libgtest-dev libgmock-dev googletest
      libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7
      libhwloc15 libfabric1 libibverbs1 libpsm-infinipath1 libpsm2-2 libucx0 libmunge2 libnl-3-200 libnl-route-3-200
      librdmacm1 libnuma1)
rm -f "$dir"/*.deb
cd "$dir"
apt-get download "${pkgs[@]}" >/dev/null 2>&1
du -sh "$dir"
ls "$dir" | wc -l
