#!/usr/bin/env bash
# Installs, from Debian packages, whatever the build, the tests and `make run`
# need and is not yet on this machine. Idempotent: a second run does nothing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libtorch-dev libopenblas0-pthread
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libblosc-dev
  python3-torch python3-numpy python3-yaml python3-matplotlib
  python3-zarr python3-numcodecs
  libcli11-dev prometheus-cpp-dev libhealpix-cxx-dev python3-astropy-healpix
  libcivetweb-dev prometheus prometheus-pushgateway
  slurm-wlm munge
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
