#!/usr/bin/env python3
"""The roofline of tensorgrad's workloads (issue 15), measured in one run.

For each workload of build-bench/bench/tensorgrad_bench:
  1. a run with TG_PROFILE=1 counts, per op kind, the calls, the seconds in
     the kernel, the floating-point operations of the products (matmul,
     AccumulateGrad's product form, convolutions, the recurrent sequences:
     2 m n k each) and the bytes each kernel reads and writes (inputs plus
     output, a tensor counted once per kernel that touches it);
  2. a run without the profile gives the time of one unit (an epoch's step,
     a predict call);
  3. build-bench/bench/machine_limits measures the GEMM rate (OpenBLAS, a
     1024^3 product) and the STREAM-triad bandwidth at 1 and 2 threads,
     before every workload; the best of these is the machine's limit.
Per op kind the floor is max(flops / GEMM rate, bytes / bandwidth), summed
over the op kinds, per unit. Two floors are printed: at the large-product
GEMM rate, and at the rate the products reached on their own shapes in the
same profiled run ("shapes"). The bytes are counted at the memory's
bandwidth, from memory, or from cache for the two workloads whose data stay
in the L2 cache (rlstep, one-row predict).

usage: /usr/bin/python3 bench/roofline.py [--build build-bench] [--threads 1,2] [--workloads mlp_fit,...]
"""
import argparse
import os
import re
import subprocess
import sys

# workload -> (tensorgrad_bench counter, seconds of one unit per counter value, what a unit is, how units are
# counted in the profile, whether a unit's data stay in the L2 cache). In cache: the 4-64-64-2 network's weights,
# Adam moments, gradients and a batch of 32 rows' activations come to about 120 KB; the others' weights or
# activations are megabytes.
WORKLOADS = {
    "mlp_fit": ("s_per_epoch", 1.0 / 114, "step", "optimizer_tick", False),
    "cnn_fit": ("s_per_epoch", 1.0 / 114, "step", "optimizer_tick", False),
    "resnet_fit": ("s_per_epoch", 1.0 / 446, "step", "optimizer_tick", False),
    "rlstep": ("us_per_step", 1e-6, "step", "optimizer_tick", True),
    "lstm_step": ("us_per_step", 1e-6, "step", "optimizer_tick", False),
    "gru_step": ("us_per_step", 1e-6, "step", "optimizer_tick", False),
    "predict": ("us_per_image", 500e-6, "batch of 500", "runs", False),
    "trainer_predict_row": ("us_per_step", 1e-6, "row", "runs", True),
}
DEFAULT = "mlp_fit,cnn_fit,rlstep,predict,trainer_predict_row,lstm_step,gru_step"

PROFILE_LINE = re.compile(r"^\s+(\S+)\s+([\d.]+) s\s+[\d.]+%\s+(\d+) calls\s+([\d.]+) GFLOP\s+([\d.]+) GB")


def run(cmd, env):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)


def bench(exe, workload, threads, profile):
    env = dict(os.environ, TG_THREADS=str(threads), TG_REPS="1" if profile else "3")
    if profile:
        env["TG_PROFILE"] = "1"
    out = run([exe, f"--benchmark_filter=^{workload}/"], env)
    ops, runs = {}, 0
    for line in out.stderr.splitlines():
        m = PROFILE_LINE.match(line)
        if m:
            ops[m.group(1)] = dict(seconds=float(m.group(2)), calls=int(m.group(3)), gflop=float(m.group(4)),
                                   gb=float(m.group(5)))
        r = re.match(r"TG_PROFILE: .* in kernels, (\d+) runs", line)
        if r:
            runs = int(r.group(1))
    counter = WORKLOADS[workload][0]
    value = None
    for line in out.stdout.splitlines():
        m = re.search(counter + r"=([\d.]+)([kMGm]?)", line)
        if m and ("_median" in line or value is None):
            value = float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3}[m.group(2)]
    return ops, runs, value


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build-bench")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--workloads", default=DEFAULT)
    a = p.parse_args()
    exe = os.path.join(a.build, "bench", "tensorgrad_bench")
    limits_exe = os.path.join(a.build, "bench", "machine_limits")
    for e in (exe, limits_exe):
        if not os.path.exists(e):
            sys.exit(f"{e} not found: cmake --build {a.build} --target tensorgrad_bench machine_limits")
    # The machine's limits are measured before every workload and the best of
    # them taken (this VM's rates move by a third between minutes; a limit
    # is what the machine can do, so the highest seen).
    samples = []

    def measure_limits():
        samples.append({k: float(v) for k, v in
                        (kv.split("=") for kv in run([limits_exe], dict(os.environ)).stdout.split())})

    rows = []
    for w in a.workloads.split(","):
        for t in (int(x) for x in a.threads.split(",")):
            measure_limits()
            ops, runs, _ = bench(exe, w, t, True)
            _, _, value = bench(exe, w, t, False)
            rows.append((w, t, ops, runs, value))
            print(f"measured {w} at {t} thread(s)", file=sys.stderr, flush=True)
    limits = {k: max(s[k] for s in samples) for k in samples[0]}
    print("machine (best of %d measurements in this run): GEMM %.1f / %.1f GFLOP/s, triad bandwidth %.1f / %.1f GB/s "
          "from memory, %.1f / %.1f GB/s in cache (1 / 2 threads)" %
          (len(samples), limits["gemm_gflops_1"], limits["gemm_gflops_2"], limits["bandwidth_gbs_1"],
           limits["bandwidth_gbs_2"], limits["cache_gbs_1"], limits["cache_gbs_2"]))
    print()
    print("| workload | unit | threads | GFLOP/unit | GB/unit | bytes at | products' rate (GFLOP/s) | floor (us) | "
          "floor at the shapes' rate (us) | measured (us) | measured / floor | measured / shapes' floor |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for w, t, ops, runs, value in rows:
        counter, per_value, unit, count_by, in_cache = WORKLOADS[w]
        units = runs if count_by == "runs" else ops.get(count_by, {}).get("calls", 0)
        if not units or value is None:
            print(f"| {w} | {unit} | {t} | (no profile or counter) |")
            continue
        gemm = limits[f"gemm_gflops_{t}"] * 1e9
        bw = limits[f"cache_gbs_{t}" if in_cache else f"bandwidth_gbs_{t}"] * 1e9
        flops = sum(o["gflop"] for o in ops.values()) * 1e9 / units
        bytes_ = sum(o["gb"] for o in ops.values()) * 1e9 / units
        prod = [o for o in ops.values() if o["gflop"] > 0]
        prod_rate = sum(o["gflop"] for o in prod) * 1e9 / max(sum(o["seconds"] for o in prod), 1e-12)
        floor = sum(max(o["gflop"] * 1e9 / gemm, o["gb"] * 1e9 / bw) for o in ops.values()) / units
        floor_shapes = sum(max(o["gflop"] * 1e9 / prod_rate, o["gb"] * 1e9 / bw) for o in ops.values()) / units
        measured = value * per_value
        print(f"| {w} | {unit} | {t} | {flops * 1e-9:.4g} | {bytes_ * 1e-9:.4g} | {'cache' if in_cache else 'memory'} | "
              f"{prod_rate * 1e-9:.1f} | {floor * 1e6:.4g} | {floor_shapes * 1e6:.4g} | {measured * 1e6:.4g} | "
              f"{measured / floor:.2f} | {measured / floor_shapes:.2f} |")


if __name__ == "__main__":
    main()
