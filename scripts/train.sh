#!/usr/bin/env bash
# The main job, from a fresh machine: install, build, and train the
# Fashion-MNIST classifier. Extra arguments go to the program (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
# A Vulkan device (--device vulkan, vulkan:N) or the device list needs the
# Vulkan loader and Mesa's drivers (lavapipe runs Vulkan on the CPU).
setup_flags=()
prev=""
for arg in "$@"; do
  case "$arg" in
    --device=vulkan*|--list-devices) setup_flags=(--vulkan) ;;
    vulkan*) [[ "$prev" == "--device" ]] && setup_flags=(--vulkan) ;;
  esac
  prev="$arg"
done
scripts/setup.sh "${setup_flags[@]}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTENSORGRAD_BUILD_TESTS=OFF -DTENSORGRAD_BUILD_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target train_fashion_mnist
exec build/apps/train_fashion_mnist "$@"
