#!/usr/bin/env bash
# Installs, from Debian packages, whatever the build, the tests and `make run`
# need and is not yet on this machine. Idempotent: a second run does nothing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libtorch-dev libopenblas0-openmp libdnnl-dev
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libblosc-dev
  python3-torch python3-numpy python3-yaml python3-matplotlib
  python3-zarr python3-numcodecs
  libcli11-dev prometheus-cpp-dev libhealpix-cxx-dev python3-astropy-healpix
  libcivetweb-dev prometheus prometheus-pushgateway
  slurm-wlm munge
)

# oneDNN (libdnnl-dev) runs LibTorch's float32 products (src/util/onednn_sgemm.cpp).
# OpenBLAS's OpenMP build shares LibTorch's OpenMP thread pool, so matrix
# products use every thread of a rank (src/util/threads.cpp); a machine that
# also has another BLAS (the pthread build) is pointed at it here.
OPENBLAS_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

select_openblas_openmp() {
  for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
    local name=$lib-x86_64-linux-gnu
    if [ "$(readlink -f "/etc/alternatives/$name")" != "$(readlink -f "$OPENBLAS_DIR/$lib")" ]; then
      echo "setup: $lib -> $OPENBLAS_DIR/$lib"
      $SUDO update-alternatives --quiet --set "$name" "$OPENBLAS_DIR/$lib"
    fi
  done
}

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  select_openblas_openmp
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
select_openblas_openmp
