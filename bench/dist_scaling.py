#!/usr/bin/env python3
"""Data-parallel scaling of the MLP epoch (issue 14), side by side in one run.

Runs bench's dist_mlp_epoch (the 784-500-10 MLP on Fashion-MNIST, global
batch 500, AdamW, fit with a communicator) as 1 rank x 1 thread, 2 ranks x 1
thread and 1 rank x 2 threads, interleaved for --rounds rounds, and prints
the medians, the speed-up of 2 x 1 over 1 x 1, the breakdown of the 2-rank
epoch (compute, gradient reduction, replicated update) and the projection to
8 and 64 ranks from the measured reduction time per byte.

usage: /usr/bin/python3 bench/dist_scaling.py [--build build-bench] [--rounds 3] [--epochs 3]
"""
import argparse
import os
import statistics
import subprocess
import sys


def run(exe, ranks, threads, epochs, mpiexec):
    # 1 x 2 must not be bound to one core (OpenMPI binds to cores at <= 2 ranks).
    bind = ["--bind-to", "none"] if threads > 1 else []
    cmd = [mpiexec, "-np", str(ranks), *bind, exe, "--threads", str(threads), "--epochs", str(epochs)]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    line = [l for l in out.splitlines() if l.startswith("ranks=")][-1]
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split())}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build-bench")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--mpiexec", default="mpiexec")
    a = p.parse_args()
    exe = os.path.join(a.build, "bench", "dist_mlp_epoch")
    if not os.path.exists(exe):
        sys.exit(f"{exe} not found: configure with -DTENSORGRAD_BENCH=ON and MPI, then make dist_mlp_epoch")
    configs = [(1, 1), (2, 1), (1, 2)]
    results = {c: [] for c in configs}
    for r in range(a.rounds):
        for c in configs:
            results[c].append(run(exe, c[0], c[1], a.epochs, a.mpiexec))
            print(f"round {r + 1}: {c[0]} rank(s) x {c[1]} thread(s): epoch {results[c][-1]['epoch_s']:.3f} s",
                  file=sys.stderr)
    med = {c: {k: statistics.median(x[k] for x in results[c]) for k in results[c][0]} for c in configs}
    one, two, threads2 = med[(1, 1)], med[(2, 1)], med[(1, 2)]
    steps, grad_bytes = two["steps"], two["grad_bytes"]
    print(f"MLP epoch (60,000 rows, global batch 500, {int(steps)} steps), medians of {a.rounds} rounds:")
    print(f"  1 rank  x 1 thread : {one['epoch_s']:.3f} s")
    print(f"  2 ranks x 1 thread : {two['epoch_s']:.3f} s   speed-up {one['epoch_s'] / two['epoch_s']:.2f}x")
    print(f"  1 rank  x 2 threads: {threads2['epoch_s']:.3f} s   speed-up {one['epoch_s'] / threads2['epoch_s']:.2f}x")
    update_epoch = two["update_ms"] * 1e-3 * steps
    compute = two["epoch_s"] - two["reduce_s"] - update_epoch
    print("breakdown of the 2-rank epoch:")
    print(f"  gradient reduction  {two['reduce_s']:.3f} s ({1e3 * two['reduce_s'] / steps:.3f} ms a step for "
          f"{grad_bytes / 1e6:.2f} MB; time in collectives, waiting for the slower rank included; "
          f"the reduction alone takes {two['alone_ms']:.3f} ms)")
    print(f"  replicated update   {update_epoch:.3f} s ({two['update_ms']:.3f} ms a step, the same on every rank)")
    print(f"  compute (the rest)  {compute:.3f} s (forward, backward, batches, logs)")
    # Projection: the 1-rank epoch's compute divides by R; the update stays;
    # the ring all-reduce sends 2 (R - 1) / R of the buffer a rank (1 at 2
    # ranks), so its time per byte sent, measured at 2 ranks, scales it.
    per_byte = two["alone_ms"] * 1e-3 / grad_bytes
    compute1 = one["epoch_s"] - one["update_ms"] * 1e-3 * steps
    print(f"projection (the reduction alone, {per_byte * 1e9:.3f} ns a byte sent, measured at 2 ranks on this "
          f"machine's shared memory; a network is slower):")
    for R in (8, 64):
        red = 2 * (R - 1) / R * per_byte * grad_bytes * steps
        epoch = compute1 / R + update_epoch + red
        print(f"  {R:2d} ranks: {compute1:.3f}/{R} + {update_epoch:.3f} + 2*({R}-1)/{R}*{per_byte * 1e9:.3f}e-9*"
              f"{grad_bytes:.0f}*{steps:.0f} = {compute1 / R:.3f} + {update_epoch:.3f} + {red:.3f} = {epoch:.3f} s, "
              f"speed-up {one['epoch_s'] / epoch:.1f}x")


if __name__ == "__main__":
    main()
