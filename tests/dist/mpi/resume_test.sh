#!/bin/bash
# Data-parallel failure and resumption (issue 14), at NP ranks:
#  1. a fit whose last rank throws in epoch 3 ends the whole job (MPI_Abort)
#     within 60 s, non-zero, the error printed with its rank;
#  2. the same fit run again resumes every rank from rank 0's backup and ends
#     with the weights, bit for bit, of the same fit never interrupted.
# Usage: resume_test.sh MPIEXEC CHILD NP
set -u
mpiexec=$1 child=$2 np=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() { "$mpiexec" -np "$np" --oversubscribe "$child" "$@"; }
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "== $f"; cat "$f"; done; exit 1; }

start=$(date +%s)
timeout 60 "$mpiexec" -np "$np" --oversubscribe "$child" crash "$dir/backup" "$dir/crash.txt" >"$dir/crash.log" 2>&1
rc=$?
echo "crash run: exit $rc after $(( $(date +%s) - start )) s"
[ "$rc" -ne 0 ] || fail "the crashing job exited 0"
[ "$rc" -ne 124 ] || fail "the crashing job hung (killed by timeout after 60 s)"
grep -q "tensorgrad rank $((np - 1)) of $np: fit: a failure on one rank only" "$dir/crash.log" ||
  fail "the error was not printed with its rank"
[ -f "$dir/backup/backup.gguf" ] || fail "no backup left by rank 0"
[ ! -f "$dir/crash.txt" ] || fail "the crashing job finished its fit"

run resume "$dir/backup" "$dir/resumed.txt" >"$dir/resume.log" 2>&1 || fail "the resumed job failed"
run straight "$dir/fresh" "$dir/straight.txt" >"$dir/straight.log" 2>&1 || fail "the uninterrupted job failed"
echo "resumed:       $(cat "$dir/resumed.txt")"
echo "uninterrupted: $(cat "$dir/straight.txt")"
grep -q "^first_epoch=2 epochs=3 " "$dir/resumed.txt" || fail "the resumed fit did not start at epoch 3"
[ "$(sed 's/.*hash=//' "$dir/resumed.txt")" = "$(sed 's/.*hash=//' "$dir/straight.txt")" ] ||
  fail "the resumed weights differ from the uninterrupted fit's"
[ ! -f "$dir/backup/backup.gguf" ] || fail "the finished fit left its backup"
echo "PASS"
