#!/usr/bin/env bash
# A/B of tensorgrad_bench builds: runs two builds of bench/tensorgrad_bench
# alternately (the order flips every round) and prints, per workload, the
# median over rounds of each side and their ratio. For "nothing got slower"
# checks between two commits, built in two build directories.
#
#   bench/ab.sh BASE_EXE HEAD_EXE [ROUNDS] [FILTER]
#
# Defaults: 3 rounds; the graph workloads but resnet_fit (minutes per epoch).
# TG_THREADS (default 2) and TG_REPS (default 3) are passed through.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BASE_EXE HEAD_EXE [ROUNDS] [FILTER]" >&2
  exit 2
fi
base=$1 head=$2 rounds=${3:-3} filter=${4:-'mlp_fit|mlp_steps|cnn_fit|rlstep|trainer_step|predict|eager_step'}
for exe in "$base" "$head"; do
  [ -x "$exe" ] || { echo "$exe: not an executable (build the tensorgrad_bench target first)" >&2; exit 2; }
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((round = 1; round <= rounds; round++)); do
  order="base head"
  [ $((round % 2)) = 0 ] && order="head base"
  for side in $order; do
    exe=$base
    [ "$side" = head ] && exe=$head
    echo "round $round: $side" >&2
    TG_THREADS=${TG_THREADS:-2} TG_REPS=${TG_REPS:-3} "$exe" --benchmark_filter="$filter" --benchmark_format=json \
      2>/dev/null | /usr/bin/python3 -c '
import json, sys
side = sys.argv[1]
rows = json.load(sys.stdin)["benchmarks"]
medians = [b for b in rows if b.get("aggregate_name") == "median"]
for b in medians or rows:  # one repetition: no aggregates, the run itself
    for unit in ("s_per_epoch", "us_per_step", "us_per_batch", "us_per_image"):
        if unit in b:
            print(side, b["run_name"].split("/")[0], unit, b[unit])' "$side" >>"$out"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
units = {}
for line in open(sys.argv[1]):
    side, name, unit, value = line.split()
    runs[name][side].append(float(value))
    units[name] = unit
print(f"{'workload':14s} {'unit':12s} {'base':>10s} {'head':>10s} {'head/base':>9s}")
for name, sides in runs.items():
    if not sides["base"] or not sides["head"]:
        print(f"{name:14s} {units[name]:12s} only in the {'head' if sides['head'] else 'base'} build")
        continue
    b, h = statistics.median(sides["base"]), statistics.median(sides["head"])
    print(f"{name:14s} {units[name]:12s} {b:10.4g} {h:10.4g} {h / b:9.3f}")
PY
