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
# llama.cpp for the LLaMA GGUF checks (tests/llama_js: node-llama-cpp's
# prebuilt CPU libraries, pinned likewise, about 85 MB). --ignore-scripts and
# NODE_LLAMA_CPP_SKIP_DOWNLOAD: its install script would download or build
# llama.cpp; --omit=optional: the optional packages are its GPU builds (about
# 600 MB), and the CPU build is a direct dependency.
if command -v node >/dev/null && command -v npm >/dev/null && [[ ! -d tests/llama_js/node_modules ]]; then
  NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --prefix tests/llama_js --ignore-scripts --omit=optional --no-audit --no-fund ||
    echo "test: npm ci in tests/llama_js failed; the llama.cpp checks (LlamaJs.*) will skip" >&2
fi
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DTENSORGRAD_BUILD_TESTS=ON -DTENSORGRAD_BUILD_BENCH=OFF >/dev/null
cmake --build build-test -j"$(nproc)"
ctest --test-dir build-test --output-on-failure -j"$(nproc)"
