#!/usr/bin/env bash
# Installs the Debian 12 packages tensorgrad needs to build, test and run its
# main job; with --bench also the peers the benchmarks compare against.
# Idempotent: runs apt-get only when a package is missing.
set -euo pipefail

packages=(
  g++ cmake make pkg-config          # toolchain
  libopenblas-dev                    # sgemm for large products
  libxsmm-dev                        # JIT small GEMMs (no per-call allocation)
  libpthreadpool-dev                 # the compute thread pool (as XNNPACK and PyTorch)
  zlib1g-dev                         # gzipped IDX files
  libcli11-dev                       # command-line options of the apps
  libgtest-dev                       # tests
  dataset-fashion-mnist              # the main job's data, /usr/share/datasets/fashion-mnist
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(libbenchmark-dev python3-torch python3-numpy libtorch-dev libdlib-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
