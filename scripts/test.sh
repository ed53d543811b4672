#!/usr/bin/env bash
# Builds tensorgrad and runs every test, from a fresh machine (installs the
# main job's packages and the test-only ones: scripts/setup.sh --test).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
# The third-party GGUF check's reader (tests/gguf_js, pinned by its
# package-lock.json). Without it GGUFThirdParty.* skips, saying so.
if command -v node >/dev/null && command -v npm >/dev/null && [[ ! -d tests/gguf_js/node_modules ]]; then
  npm ci --prefix tests/gguf_js --no-audit --no-fund ||
    echo "test: npm ci in tests/gguf_js failed; GGUFThirdParty.HuggingFaceReaderAgrees will skip" >&2
fi
# ONNX Runtime for the third-party check of ONNX exports (tests/onnx_js,
# pinned likewise). --ignore-scripts: the package's install script downloads
# GPU binaries from outside; its CPU binaries ship inside the package.
if command -v node >/dev/null && command -v npm >/dev/null && [[ ! -d tests/onnx_js/node_modules ]]; then
  npm ci --prefix tests/onnx_js --ignore-scripts --no-audit --no-fund ||
    echo "test: npm ci in tests/onnx_js failed; OnnxExport.OnnxRuntimeRunsEveryExportToTheSamePredictions will skip" >&2
fi
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DTENSORGRAD_BUILD_TESTS=ON -DTENSORGRAD_BUILD_BENCH=OFF >/dev/null
cmake --build build-test -j"$(nproc)"
ctest --test-dir build-test --output-on-failure -j"$(nproc)"
