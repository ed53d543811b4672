#!/usr/bin/env bash
# Builds tensorgrad and runs every test, from a fresh machine (installs the
# main job's packages and the test-only ones: scripts/setup.sh --test).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DTENSORGRAD_BUILD_TESTS=ON -DTENSORGRAD_BUILD_BENCH=OFF >/dev/null
cmake --build build-test -j"$(nproc)"
ctest --test-dir build-test --output-on-failure -j"$(nproc)"
