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
want=(libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev libhealpix-cxx-dev libblosc-dev
      prometheus-cpp-dev libcivetweb-dev libgtest-dev libopenmpi-dev openmpi-bin openmpi-common libopenblas0-openmp)
# Their dependencies, without what every Linux base image has (libc, libstdc++, libgcc, zlib, ...).
skip='^(libc6|libgcc-s1|libstdc\+\+6|zlib1g|libzstd1|liblz4-1|libssl3|libcurl4|libcrypt1|debconf|dpkg|perl-base|libselinux1|libpcre2|libsystemd0|libudev1|libgomp1|libgfortran5|libquadmath0|libnl-3-200|libnl-route-3-200|libnuma1|libbz2-1.0|liblzma5|libcom-err2|libgssapi|libk5crypto3|libkrb5|libkeyutils1|libidn2|libunistring|libnghttp2|libpsl5|librtmp1|libssh2|libbrotli|libldap|libsasl2|libgnutls|libhogweed|libnettle|libgmp|libp11-kit|libtasn1|libffi|sensible-utils|libsqlite3-0|libxml2|libicu)'
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
         "${want[@]}" | grep -E '^[a-z0-9]' | sort -u | grep -vE "$skip" | grep -vE ':i386$')
cd "$dir"
apt-get download $pkgs >/dev/null
du -sh "$dir"
ls "$dir" | wc -l
