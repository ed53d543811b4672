#!/usr/bin/env bash
# The thread pool beside another process (issue 15): runs one workload of
# tensorgrad_bench at 1 and 2 threads, alternating, while a shell loop spins
# on one core, and prints each side's runs and median.
#
#   bench/contention.sh [EXE] [ROUNDS] [WORKLOAD]
#
# Defaults: build-bench/bench/tensorgrad_bench, 8 rounds, mlp_fit (cnn_fit is
# the other workload of the issue). One epoch per run (TG_REPS=1).
set -euo pipefail
exe=${1:-build-bench/bench/tensorgrad_bench} rounds=${2:-8} workload=${3:-mlp_fit}
[ -x "$exe" ] || { echo "$exe: not an executable (build the tensorgrad_bench target first)" >&2; exit 2; }
( while :; do :; done ) &
spinner=$!
trap 'kill $spinner 2>/dev/null' EXIT
declare -A runs
for _ in $(seq "$rounds"); do
  for t in 1 2; do
    ms=$(TG_THREADS=$t TG_REPS=1 "$exe" --benchmark_filter="^$workload/" --benchmark_format=csv 2>/dev/null |
         awk -F, 'NR > 1 && $1 !~ /_(mean|median|stddev|cv)"$/ { print $3 }' | tail -1)
    runs[$t]+=" $ms"
  done
done
for t in 1 2; do
  median=$(tr ' ' '\n' <<<"${runs[$t]}" | grep . | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  echo "$workload beside a spinning process, $t thread(s): median $median ms of${runs[$t]}"
done
