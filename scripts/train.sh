#!/usr/bin/env bash
# The main job, from a fresh machine: install, build, and train the
# Fashion-MNIST classifier. Extra arguments go to the program (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTENSORGRAD_BUILD_TESTS=OFF -DTENSORGRAD_BUILD_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target train_fashion_mnist
exec build/apps/train_fashion_mnist "$@"
