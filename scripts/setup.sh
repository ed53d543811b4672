#!/usr/bin/env bash
# Installs the Debian 12 packages tensorgrad needs, only those of the paths asked for:
#   scripts/setup.sh                  the main job: toolchain, libraries, Fashion-MNIST
#                                     (what scripts/train.sh and the examples need)
#   scripts/setup.sh --test           also the test-only packages (scripts/test.sh)
#   scripts/setup.sh --bench          also Google Benchmark and the peers bench/compare.py
#                                     compares against
#   scripts/setup.sh --plot           also gnuplot, for training curves as PNG (--plot of the
#                                     main job, nn::plot_history)
#   scripts/setup.sh --test --bench   both (the flags combine)
# Idempotent: runs apt-get only when a package is missing.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/setup.sh [--test] [--bench] [--plot] [--vulkan]

Installs the Debian 12 packages tensorgrad needs (apt-get; as root, or through sudo).
  (no flag)  the main job's: g++, cmake, make, pkg-config, libopenblas-dev, libxsmm-dev,
             libtbb-dev, libsleef-dev, zlib1g-dev, libcli11-dev, libpcre2-dev, dataset-fashion-mnist, dict-gcide,
             and the Vulkan backend's build packages: libvulkan-dev, glslc
  --test     adds the test-only packages: libgtest-dev, gnuplot-nox (the plot test),
             libopenmpi-dev and openmpi-bin (the MPI communicator and its tests),
             mesa-vulkan-drivers and vulkan-validationlayers (the Vulkan tests run on
             lavapipe, Mesa's Vulkan driver on the CPU, one of them under the validation
             layer), doxygen and graphviz (the API reference, scripts/docs.sh, which a
             test builds and fails on any warning), and nodejs and npm when no `node`
             is installed (the third-party GGUF check)
  --vulkan   adds what running on a Vulkan device needs: the loader (libvulkan1) and Mesa's
             drivers (mesa-vulkan-drivers: lavapipe, and the AMD and Intel GPUs' drivers);
             NVIDIA's driver comes from NVIDIA
  --plot     adds gnuplot-nox: training curves as PNG (the main job's --plot PATH)
  --bench    adds the benchmarks' packages: libbenchmark-dev, python3, python3-torch,
             python3-numpy, libtorch-dev, libdlib-dev
  -h, --help prints this and exits
The flags can be combined; packages already installed are left alone.
EOF
}

want_test=0
want_bench=0
want_plot=0
want_vulkan=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --bench) want_bench=1 ;;
    --plot) want_plot=1 ;;
    --vulkan) want_vulkan=1 ;;
    -h|--help) usage; exit 0 ;;
    *)
      echo "setup: unknown option '$arg'" >&2
      usage >&2
      exit 2
      ;;
  esac
done

# The base: what the main job (scripts/train.sh) needs to build and run.
packages=(
  g++ cmake make pkg-config          # toolchain
  libopenblas-dev                    # sgemm for large products
  libxsmm-dev                        # JIT small GEMMs (no per-call allocation)
  libtbb-dev                         # oneTBB: the compute threads (work is taken, not handed out)
  libsleef-dev                       # vectorised exp and tanh (the fused LSTM and GRU gates)
  zlib1g-dev                         # gzipped IDX files
  libcli11-dev                       # command-line options of the apps and examples
  nlohmann-json3-dev                 # model and compile configurations inside GGUF files (io)
  libfp16-dev                        # IEEE half-precision conversion for F16 tensors in GGUF files
  libpcre2-dev                       # Unicode regexes of the text layer's pre-tokenizers (tokenizers)
  dataset-fashion-mnist              # the main job's data, /usr/share/datasets/fashion-mnist
  dict-gcide                         # --model gpt's English text, /usr/share/dictd/gcide.dict.dz
  libvulkan-dev glslc                # the Vulkan backend: its headers, and its shaders compiled at build
  libonnx-dev libprotobuf-dev        # ONNX import (io::load_onnx): ONNX 1.12's protobuf classes
)
if ((want_test)); then
  packages+=(
    libgtest-dev                     # the GoogleTest suites under CTest
    gnuplot-nox                      # the plot test draws a PNG
    libopenmpi-dev openmpi-bin       # the dist layer's MPI communicator and its mpiexec tests
    mesa-vulkan-drivers              # lavapipe: the Vulkan tests run on the CPU
    vulkan-validationlayers          # the Vulkan tests' validation-layer entry
    doxygen graphviz                 # the API reference (scripts/docs.sh); Docs.DoxygenNoWarnings
    libonnx-testdata                 # ONNX's backend test cases, read by the ONNX import tests
  )
fi
if ((want_vulkan)); then
  packages+=(
    libvulkan1                       # the Vulkan loader, opened at run time
    mesa-vulkan-drivers              # Mesa's drivers: lavapipe (CPU), AMD, Intel
  )
fi
if ((want_plot)); then
  packages+=(
    gnuplot-nox                      # training curves as PNG (nn::plot_history, --plot)
  )
fi
if ((want_bench)); then
  packages+=(
    libbenchmark-dev                 # Google Benchmark: bench/tensorgrad_bench
    python3                          # /usr/bin/python3 runs bench/compare.py and the PyTorch peer
    python3-torch python3-numpy      # the PyTorch peer
    libtorch-dev                     # the libtorch peer
    libdlib-dev                      # the dlib peer
  )
fi

# Node.js runs the third-party GGUF check (tests/gguf_js, @huggingface/gguf).
# Debian's nodejs only where no node is installed at all: a node from
# elsewhere (nodesource) brings its own npm, and Debian's npm package
# conflicts with it.
if ((want_test)) && ! command -v node >/dev/null 2>&1; then
  packages+=(nodejs npm)
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
