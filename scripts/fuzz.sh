#!/usr/bin/env bash
# Fuzzes tensorgrad's GGUF reader or ONNX importer with libFuzzer
# (fuzz/README.md). Not part of the build or test commands: run it by hand
# after changing src/io/gguf.cpp or src/io/onnx/.
#
#   scripts/fuzz.sh [RUNS]        the GGUF reader: RUNS executions (default
#                                 10000000), then the corpus is
#                                 merge-minimised into fuzz/corpus/
#   scripts/fuzz.sh onnx [RUNS]   the ONNX importer (default 1000000 runs),
#                                 from the small models of Debian's
#                                 libonnx-testdata; corpus fuzz/onnx-corpus/
#
# Builds the library and fuzz/gguf_fuzzer with clang (CXX, default clang++-14;
# Debian 12: apt-get install clang-14 libclang-rt-14-dev) and
# -fsanitize=fuzzer,address,undefined into build-fuzz/, writes valid seed
# files into fuzz/seeds/ with GGUFWriter, fuzzes starting from them and from
# fuzz/corpus/, and merges what it found into fuzz/corpus/ (inputs of at most
# 4096 bytes; the corpus stays under 1 MB). The run is niced and uses one
# process. A crash, sanitizer report or leak stops the run: the input is kept
# as fuzz/findings/crash-* (or leak-*, timeout-*, oom-*), the stack is in
# build-fuzz/fuzz.log, and the script exits 1. Reproduce one with
#   build-fuzz/fuzz/gguf_fuzzer fuzz/findings/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

target=gguf
if [[ "${1:-}" == onnx || "${1:-}" == gguf ]]; then
  target="$1"
  shift
fi
if [[ "$target" == onnx ]]; then
  runs="${1:-1000000}"; corpus=fuzz/onnx-corpus; seeds=fuzz/onnx-seeds
else
  runs="${1:-10000000}"; corpus=fuzz/corpus; seeds=fuzz/seeds
fi
fuzzer=build-fuzz/fuzz/${target}_fuzzer
[[ "$runs" =~ ^[0-9]+$ ]] || { echo "fuzz: RUNS must be a number of executions, got '$runs'" >&2; exit 2; }
cxx="${CXX:-clang++-14}"
command -v "$cxx" >/dev/null || {
  echo "fuzz: $cxx not found: install clang-14 and libclang-rt-14-dev (Debian 12), or set CXX to a clang++" >&2
  exit 2
}
jobs="${FUZZ_BUILD_JOBS:-2}"
max_len=4096

flags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DTENSORGRAD_BUILD_FUZZ=ON -DTENSORGRAD_BUILD_TESTS=OFF -DTENSORGRAD_BUILD_BENCH=OFF \
  -DTENSORGRAD_BUILD_APPS=OFF -DTENSORGRAD_NATIVE=OFF >/dev/null
if [[ "$target" == onnx ]]; then
  nice -n 10 cmake --build build-fuzz -j"$jobs" --target onnx_fuzzer
else
  nice -n 10 cmake --build build-fuzz -j"$jobs" --target gguf_fuzzer gguf_seeds
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

rm -rf "$seeds" && mkdir -p "$seeds" "$corpus" fuzz/findings
if [[ "$target" == onnx ]]; then
  # ONNX's own backend test models of at most max_len bytes (Debian's libonnx-testdata).
  find -L /usr/include/onnx/backend/test/data -name model.onnx -size -"$max_len"c |
    while read -r f; do cp "$f" "$seeds/$(echo "$f" | md5sum | cut -c1-16).onnx"; done
else
  build-fuzz/fuzz/gguf_seeds "$seeds"
fi

# New inputs go to the first folder (a scratch copy); the others are read.
work=build-fuzz/corpus-work-$target
mkdir -p "$work"
log=build-fuzz/fuzz-$target.log
echo "fuzz: $runs executions, log in $log"
set +e +o pipefail
nice -n 10 "$fuzzer" -runs="$runs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix=fuzz/findings/ "$work" "$seeds" "$corpus" 2>&1 | tee "$log" |
  grep --line-buffered -E '^#[0-9]+[[:space:]]+(pulse|DONE|INITED)|ERROR|SUMMARY|Test unit written'
status=${PIPESTATUS[0]}
set -e -o pipefail
if ((status != 0)); then
  echo "fuzz: the fuzzer stopped with status $status: a finding; the input is in fuzz/findings/, the stack in $log" >&2
  exit 1
fi
grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1

# Merge-minimise everything into a fresh corpus, then replace the committed one.
rm -rf build-fuzz/corpus-merged && mkdir -p build-fuzz/corpus-merged
nice -n 10 "$fuzzer" -merge=1 -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
  build-fuzz/corpus-merged "$corpus" "$seeds" "$work" >build-fuzz/merge.log 2>&1 || {
  echo "fuzz: the merge failed, see build-fuzz/merge.log" >&2
  exit 1
}
rm -rf "$corpus" && mv build-fuzz/corpus-merged "$corpus"
files=$(find "$corpus" -type f | wc -l)
bytes=$(du -sb "$corpus" | cut -f1)
echo "fuzz: $corpus holds $files files, $bytes bytes"
if ((bytes > 1048576)); then
  echo "fuzz: the corpus is over 1 MB; lower max_len in scripts/fuzz.sh before committing it" >&2
  exit 1
fi
