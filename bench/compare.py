#!/usr/bin/python3
"""Runs tensorgrad's benchmarks side by side with the reference peers in
../shared/bench (PyTorch, libtorch, dlib) and prints one table.

    /usr/bin/python3 bench/compare.py            # 3 rounds, 2 threads
    /usr/bin/python3 bench/compare.py --quick    # 1 round, fewer repetitions

What it does, from the repository root (or wherever --root points):
  1. builds what is missing in a build directory of its own, build-bench/
     (--build-dir), whatever configured build/ before (scripts/train.sh turns
     the benchmarks off there): configures it with the project's CMake and
     -DTENSORGRAD_BUILD_BENCH=ON (tests and apps off) and brings
     build-bench/bench/tensorgrad_bench up to date incrementally (unless
     --no-build); builds build-bench/peer-libtorch/peer_libtorch from the
     peers' CMakeLists.txt and build-bench/peer_dlib with the build line at
     the top of peer_dlib.cpp;
     the eager workload's peers from this repository: bench/eager_peer_pytorch.py
     and build-bench/eager-peer-libtorch/eager_peer_libtorch (from
     bench/eager_peer_libtorch/CMakeLists.txt);
  2. runs every workload (mlp, cnn, rlstep, predict, eager) for several rounds, tensorgrad
     and the peers alternating within each round (the order flips every
     round), all at the same thread count;
  3. prints, per workload, the median over rounds for each implementation,
     the ratio peer / tensorgrad (> 1 means tensorgrad is faster) and the
     target from the issue.

Google Benchmark (libbenchmark-dev) and the peers' packages come from
`scripts/setup.sh --bench`; without Google Benchmark the script stops and says
so. A peer whose package is absent (python3-torch, libtorch-dev, libdlib-dev)
is skipped with a message; the script then still measures tensorgrad alone.
Standard library only.
"""
import argparse
import datetime
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time

TARGETS = {  # workload row -> (target, unit); lower is better
    "mlp (fit)": (0.75, "s/epoch"),
    "mlp (step loop)": (0.75, "s/epoch"),
    "cnn (fit)": (2.4, "s/epoch"),
    # issue 15: the mixed_bfloat16 policy (beside PyTorch's float32 epoch; PyTorch's peer has no bfloat16 run)
    "mlp (fit, mixed_bfloat16)": (None, "s/epoch"), "cnn (fit, mixed_bfloat16)": (None, "s/epoch"),
    "resnet (fit)": (None, "s/epoch"),
    "rlstep": (20.0, "us/step"),
    "trainer step": (20.0, "us/step"),
    "predict": (8.0, "us/image"),
    "eager step": (None, "us/step"),
    "eager Adam step": (25.0, "us/step"),  # issue 12: ag::nn modules and ag::optim::Adam
    # issue 15: at most 1/3 of PyTorch's time (a ratio, not an absolute target)
    "lstm step": (None, "us/step"), "lstm inference": (None, "us/batch"),
    "gru step": (None, "us/step"), "gru inference": (None, "us/batch"),
    # issue 43: the GPT step at most 1/3 of PyTorch's (a ratio); sampling in bytes per second (higher is better)
    "gpt step": (None, "ms/step"), "gpt sampling": (None, "bytes/s"),
    # issue 58: the LLaMA-style model's step (at most 1/3 of PyTorch's) and generation; and llama.cpp itself
    # (node-llama-cpp, CPU) on the files tensorgrad wrote, beside tensorgrad's CausalLM on the same files
    "llama step": (None, "ms/step"), "llama generation": (None, "bytes/s"),
    "llama file F32: prompt": (None, "tokens/s"), "llama file F32: generation": (None, "tokens/s"),
    "llama file Q8_0: prompt": (None, "tokens/s"), "llama file Q8_0: generation": (None, "tokens/s"),
}
LLAMA_FILE_ROWS = ["llama file F32: prompt", "llama file F32: generation", "llama file Q8_0: prompt",
                   "llama file Q8_0: generation"]
ROWS = ["mlp (fit)", "mlp (fit, mixed_bfloat16)", "mlp (step loop)", "cnn (fit)", "cnn (fit, mixed_bfloat16)",
        "resnet (fit)", "rlstep", "trainer step", "eager Adam step",
        "predict", "eager step", "lstm step", "lstm inference", "gru step", "gru inference", "gpt step", "gpt sampling",
        "llama step", "llama generation"] + LLAMA_FILE_ROWS
WORKLOADS = ["mlp", "cnn", "resnet", "rlstep", "predict", "eager", "lstm", "gru", "gpt", "llama"]
# The workloads each peer has: the shared peers' (../shared/bench), and the
# eager step, whose peers live in this repository's bench/ (dlib has none).
PEER_WORKLOADS = {"pytorch": {"mlp", "cnn", "resnet", "rlstep", "predict", "eager", "lstm", "gru", "gpt", "llama"},
                  "libtorch": {"mlp", "rlstep", "predict", "eager"},
                  "dlib": {"mlp", "rlstep"},
                  "llama.cpp": {"llama"}}
PEERS = ["pytorch", "libtorch", "dlib", "llama.cpp"]
HIGHER_IS_BETTER = {"gpt sampling", "llama generation"} | set(LLAMA_FILE_ROWS)  # rates; every other row is a time
LLAMA_DIR = None  # where the llama rows' GGUF files are written (main: the build directory's llama-files/)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env=None, timeout=900, cwd=None):
    """Runs cmd, returns stdout; raises RuntimeError with stderr on failure."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    shown = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    log(f"  $ {shown + ' ' if shown else ''}{' '.join(shlex.quote(c) for c in cmd)}")
    try:
        p = subprocess.run(cmd, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout} s")
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-2000:]}")
    return p.stdout


# ---------------------------------------------------------------- machine load
# The machine may be shared: before each measurement wait (a bounded time) for
# the other processes to go quiet, and record how busy they kept the CPUs
# during it (all CPU time on the machine minus our child's own), so that noisy
# samples are visible in the per-round listing.

CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1


def cpu_busy_seconds():
    """CPU-seconds spent busy by the whole machine since boot (None if unknown)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    v = [int(x) for x in fields[1:]]
    # user nice system idle iowait irq softirq steal ...
    return (v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)) / CLK_TCK


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class LoadMeter:
    """Share of the machine's CPUs that other processes used while a child ran."""

    def __enter__(self):
        self.busy0, self.child0, self.t0 = cpu_busy_seconds(), children_cpu_seconds(), time.monotonic()
        return self

    def __exit__(self, *exc):
        busy1, child1, t1 = cpu_busy_seconds(), children_cpu_seconds(), time.monotonic()
        if self.busy0 is None or busy1 is None or t1 <= self.t0:
            self.others = None
        else:
            others = (busy1 - self.busy0) - (child1 - self.child0)
            self.others = max(0.0, min(1.0, others / ((t1 - self.t0) * NCPU)))
        return False


def wait_for_quiet(max_wait, threshold=0.15):
    """Waits up to max_wait seconds for other processes to use < threshold of the CPUs."""
    if max_wait <= 0:
        return None
    deadline = time.monotonic() + max_wait
    while True:
        b0, t0 = cpu_busy_seconds(), time.monotonic()
        time.sleep(1.0)
        b1, t1 = cpu_busy_seconds(), time.monotonic()
        if b0 is None or b1 is None:
            return None
        load = (b1 - b0) / ((t1 - t0) * NCPU)
        if load < threshold or time.monotonic() >= deadline:
            return load


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in output: " + text[-500:])


# ---------------------------------------------------------------- building

# The options of the benchmark build, given on every configure so that the
# build directory holds them whatever configured it before.
BENCH_CMAKE_OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DTENSORGRAD_BUILD_BENCH=ON",
                       "-DTENSORGRAD_BUILD_TESTS=OFF", "-DTENSORGRAD_BUILD_APPS=OFF"]
SETUP_HINT = "run scripts/setup.sh --bench (as root or with sudo), then this command again"


def benchmark_found(build, configure_output):
    """Whether the configure in `build` found Google Benchmark (and so added bench/)."""
    if "Google Benchmark not found" in configure_output:
        return False
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("benchmark_DIR:"):
                    return not line.strip().endswith("NOTFOUND")
    except OSError:
        return False
    return False


def build_tensorgrad(root, build, no_build):
    exe = os.path.join(build, "bench", "tensorgrad_bench")
    if no_build:
        if not os.path.exists(exe):
            sys.exit(f"error: {exe} is missing and --no-build was given; run without --no-build to build it")
        return exe
    if shutil.which("cmake") is None:
        sys.exit("error: cmake is not installed, so tensorgrad_bench cannot be built; " + SETUP_HINT)
    try:
        out = run(["cmake", "-S", root, "-B", build] + BENCH_CMAKE_OPTIONS, timeout=600)
    except RuntimeError as e:
        sys.exit(f"error: configuring the benchmark build in {build} failed: {str(e)[-1500:]}\n"
                 f"(a missing package? {SETUP_HINT})")
    if not benchmark_found(build, out):
        sys.exit("error: Google Benchmark (Debian's libbenchmark-dev) is not installed, so CMake skipped "
                 f"bench/ and {build} has no tensorgrad_bench to build; {SETUP_HINT}")
    try:
        run(["cmake", "--build", build, "-j2", "--target", "tensorgrad_bench"], timeout=1800)
    except RuntimeError as e:
        if os.path.exists(exe):
            log(f"warning: building tensorgrad_bench failed ({str(e)[:300]}); using the existing {exe}")
        else:
            sys.exit(f"error: cannot build tensorgrad_bench: {e}")
    return exe


def torch_python_ok():
    try:
        run(["/usr/bin/python3", "-c", "import torch"], timeout=120)
        return True
    except (RuntimeError, FileNotFoundError):
        return False


def build_libtorch(peers, build, src=None, name="peer_libtorch", subdir="peer-libtorch", what="libtorch"):
    """Builds a libtorch peer from the CMakeLists.txt in `src` (default: the
    shared peer in `peers`/libtorch) into `build`/`subdir`; None, with a
    message, when its source, Torch's CMake package or the build is missing."""
    exe = os.path.join(build, subdir, name)
    if os.path.exists(exe):
        return exe
    src = src or os.path.join(peers, "libtorch")
    if not os.path.exists(os.path.join(src, name + ".cpp")):
        log(f"skipping {what}: {src}/{name}.cpp not found")
        return None
    if not any(os.path.exists(os.path.join(d, "TorchConfig.cmake")) for d in (
            "/usr/lib/x86_64-linux-gnu/cmake/Torch", "/usr/share/cmake/Torch", "/usr/lib/cmake/Torch")):
        log(f"skipping {what}: Torch's CMake package not found (install Debian's libtorch-dev)")
        return None
    try:
        run(["cmake", "-S", src, "-B", os.path.join(build, subdir), "-DCMAKE_BUILD_TYPE=Release"], timeout=600)
        run(["cmake", "--build", os.path.join(build, subdir)], timeout=1800)
    except RuntimeError as e:
        log(f"skipping {what}: build failed: {str(e)[:500]}")
        return None
    return exe


def build_dlib(peers, build):
    exe = os.path.join(build, "peer_dlib")
    if os.path.exists(exe):
        return exe
    src = os.path.join(peers, "dlib", "peer_dlib.cpp")
    if not os.path.exists(src):
        log(f"skipping dlib: {src} not found")
        return None
    if shutil.which("pkg-config") is None:
        log("skipping dlib: pkg-config not found")
        return None
    try:
        flags = run(["pkg-config", "--cflags", "--libs", "dlib-1"], timeout=60).split()
    except RuntimeError:
        log("skipping dlib: pkg-config knows no dlib-1 (install Debian's libdlib-dev)")
        return None
    try:
        # The build line at the top of peer_dlib.cpp.
        run(["g++", "-O3", "-march=native", "-std=c++17", src, "-o", exe] + flags + ["-lpthread"], timeout=1800)
    except RuntimeError as e:
        log(f"skipping dlib: build failed: {str(e)[:500]}")
        return None
    return exe


# ---------------------------------------------------------------- measuring

def tensorgrad_run(exe, workload, threads, reps):
    """Returns {row: value} from one tensorgrad_bench process."""
    # Full names carry suffixes ("rlstep/iterations:2000/repeats:5/manual_time").
    filt = {"mlp": "^mlp_(fit|fit_bf16|steps)/", "cnn": "^cnn_fit(_bf16)?/", "resnet": "^resnet_fit/",
            "rlstep": "^(rlstep|trainer_step|eager_adam_step)/", "predict": "^predict/", "eager": "^eager_step/",
            "lstm": "^lstm_(step|infer)/", "gru": "^gru_(step|infer)/", "gpt": "^gpt_(step|sample)/",
            "llama": "^llama_(step|sample|file_f32|file_q8_0)/"}[workload]
    env = {"TG_THREADS": str(threads)}
    if workload == "llama":
        env["TG_LLAMA_DIR"] = LLAMA_DIR
    if reps:
        env["TG_REPS"] = str(reps)
    out = run([exe, f"--benchmark_filter={filt}", "--benchmark_format=json"], env=env)
    try:
        data = json.loads(out)
    except ValueError:
        raise RuntimeError("tensorgrad_bench printed no JSON: " + out.strip()[-500:])
    counters = {"mlp_fit": ("mlp (fit)", "s_per_epoch"), "mlp_steps": ("mlp (step loop)", "s_per_epoch"),
                "mlp_fit_bf16": ("mlp (fit, mixed_bfloat16)", "s_per_epoch"),
                "cnn_fit": ("cnn (fit)", "s_per_epoch"), "cnn_fit_bf16": ("cnn (fit, mixed_bfloat16)", "s_per_epoch"), "resnet_fit": ("resnet (fit)", "s_per_epoch"),
                "rlstep": ("rlstep", "us_per_step"), "trainer_step": ("trainer step", "us_per_step"), "predict": ("predict", "us_per_image"),
                "eager_step": ("eager step", "us_per_step"), "eager_adam_step": ("eager Adam step", "us_per_step"),
                "lstm_step": ("lstm step", "us_per_step"), "lstm_infer": ("lstm inference", "us_per_batch"),
                "gru_step": ("gru step", "us_per_step"), "gru_infer": ("gru inference", "us_per_batch"),
                "gpt_step": ("gpt step", "ms_per_step"), "gpt_sample": ("gpt sampling", "bytes_per_s"),
                "llama_step": ("llama step", "ms_per_step"), "llama_sample": ("llama generation", "bytes_per_s")}
    # Benchmarks with two counters, each its own row.
    two = {f"llama_file_{t.lower()}": [(f"llama file {t}: prompt", "prompt_tokens_per_s"),
                                       (f"llama file {t}: generation", "generation_tokens_per_s")]
           for t in ("F32", "Q8_0")}
    found, single = {}, {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            raise RuntimeError(f"{b.get('name')}: {b.get('error_message')}")
        base = b.get("run_name", b["name"]).split("/")[0]
        if base not in counters and base not in two:
            continue
        for row, counter in two.get(base, [counters.get(base)]):
            if counter not in b:
                continue
            if b.get("run_type") == "aggregate":
                if b.get("aggregate_name") == "median":
                    found[row] = b[counter]
            else:  # one repetition: no aggregates are computed
                single.setdefault(row, []).append(b[counter])
    for row, vals in single.items():
        found.setdefault(row, statistics.median(vals))
    if not found:
        raise RuntimeError("no results in tensorgrad_bench output")
    return found


def peer_run(peer, exe, workload, threads):
    """Returns {row: value} from one peer process, or {} where it lacks the workload.
    `exe` is the peer's program for this workload (for eager: bench/eager_peer_*)."""
    if workload not in PEER_WORKLOADS[peer]:
        return {}  # only peer_pytorch.py has the cnn and resnet workloads, dlib no predict or eager
    if peer == "llama.cpp":  # node-llama-cpp on the files tensorgrad_bench's llama_write wrote
        rows = {}
        for t in ("F32", "Q8_0"):
            path = os.path.join(LLAMA_DIR, t.lower() + ".gguf")
            # 127 prompt tokens in one batch from an empty cache, then 128 greedy tokens (llama.cpp's own
            # timers); tensorgrad's llama_file rows feed the 127 one position at a time and generate 127
            # after a 2-token prompt (its cache holds the model's 128 positions).
            res = last_json_line(run(["node", exe, path, "--threads", str(threads), "--kv", "F32", "--runs", "5",
                                      "--prompt", "128", "--tokens", "128"]))
            rows[f"llama file {t}: prompt"] = res["llama_cpp_prompt_tokens_per_s"]
            rows[f"llama file {t}: generation"] = res["llama_cpp_generation_tokens_per_s"]
        return rows
    if workload == "eager":
        cmd = ([exe] if peer == "libtorch" else ["/usr/bin/python3", exe]) + ["--threads", str(threads)]
        return {"eager step": last_json_line(run(cmd))["us_per_step_median"]}
    if peer == "dlib":
        if workload == "predict":
            return {}  # peer_dlib has no predict workload
        env = {"OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
        res = last_json_line(run([exe, workload], env=env))
    elif peer == "libtorch":
        cmd = [exe, workload, "--threads", str(threads)] + (["--epochs", "2"] if workload == "mlp" else [])
        res = last_json_line(run(cmd))
    else:  # pytorch
        cmd = ["/usr/bin/python3", exe, workload, "--threads", str(threads)] + (
            ["--epochs", "2"] if workload in ("mlp", "cnn") else ["--epochs", "1"] if workload == "resnet" else
            ["--steps", "0"] if workload in ("gpt", "llama") else [])
        res = last_json_line(run(cmd))
    if workload in ("mlp", "cnn"):  # the float32 epoch stands beside both of tensorgrad's policies
        return {workload + " (fit)": res["s_per_epoch_median"],
                workload + " (fit, mixed_bfloat16)": res["s_per_epoch_median"]}
    if workload == "resnet":
        return {"resnet (fit)": res["s_per_epoch_median"]}
    if workload in ("lstm", "gru"):
        return {workload + " step": res["us_per_step_median"], workload + " inference": res["us_per_inference_batch_median"]}
    if workload == "gpt":  # --steps 0: 60 timed steps and the sampling, no validation
        return {"gpt step": res["ms_per_step_median"], "gpt sampling": res["sample_bytes_per_s"]}
    if workload == "llama":
        return {"llama step": res["ms_per_step_median"], "llama generation": res["sample_bytes_per_s"]}
    if workload == "rlstep":  # the peers' step (nn.Sequential, optim.Adam, eager) stands against tensorgrad's three rows
        step = res["us_per_step_median"]
        rows = {"rlstep": step, "trainer step": step}
        if peer != "dlib":  # dlib's step is not written eagerly
            rows["eager Adam step"] = step
        return rows
    return {"predict": res["us_per_image_median"]}


# ---------------------------------------------------------------- reporting

def machine():
    info = {"nproc": str(os.cpu_count())}
    try:
        info["nproc"] = run(["nproc"], timeout=10).strip()
    except (RuntimeError, FileNotFoundError):
        pass
    info["cpu"] = "unknown"
    try:
        for line in run(["lscpu"], timeout=10).splitlines():
            if line.startswith("Model name:"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except (RuntimeError, FileNotFoundError):
        pass
    return info


def revision(root):
    """The checked-out commit and whether tracked files differ from it (read-only git calls)."""
    try:
        sha = run(["git", "-C", root, "rev-parse", "--short", "HEAD"], timeout=30).strip()
        dirty = run(["git", "--no-optional-locks", "-C", root, "status", "--porcelain",
                     "--untracked-files=no"], timeout=60).strip()
        return sha + (" with uncommitted changes" if dirty else "")
    except (RuntimeError, FileNotFoundError):
        return "unknown"


def fmt(v):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round and 1 repetition per tensorgrad benchmark")
    ap.add_argument("--rounds", type=int, help="rounds (default 3; 1 with --quick)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every implementation (default 2)")
    ap.add_argument("--workloads", default="mlp,cnn,rlstep,predict,eager",
                    help="comma-separated subset of mlp,cnn,resnet,rlstep,predict,eager,lstm,gru,gpt,llama (resnet: "
                         "minutes an epoch, gpt and llama minutes with their peers, so not in the default set; "
                         "llama's llama.cpp rows need node and tests/llama_js/node_modules)")
    ap.add_argument("--no-peers", action="store_true", help="measure tensorgrad alone")
    ap.add_argument("--no-build", action="store_true",
                    help="use the existing tensorgrad_bench in the build directory, without configuring or building")
    ap.add_argument("--build-dir", default=None, metavar="DIR",
                    help="build directory of the benchmarks and peers (default: build-bench/ in the repository "
                         "root); configured with -DTENSORGRAD_BUILD_BENCH=ON on every run")
    ap.add_argument("--wait-idle", type=float, default=30.0, metavar="S",
                    help="before each measurement, wait up to S seconds for other processes to go quiet "
                         "(default 30; 0 disables)")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="repository root (default: this script's parent directory)")
    ap.add_argument("--peers", default=None,
                    help="folder with the peer programs (default: ../shared/bench beside the repository)")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    reps = 1 if args.quick else 0  # 0: the binary's defaults (mlp 3, others 5)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in workloads:
        if w not in WORKLOADS:
            sys.exit(f"error: unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    command = "cd " + shlex.quote(os.getcwd()) + " && /usr/bin/python3 " + " ".join(shlex.quote(a) for a in sys.argv)
    root = os.path.abspath(args.root)
    if args.peers is None:
        args.peers = os.path.join(os.path.dirname(root), "shared", "bench")
    build = os.path.abspath(args.build_dir) if args.build_dir else os.path.join(root, "build-bench")
    global LLAMA_DIR
    LLAMA_DIR = os.path.join(build, "llama-files")
    started = datetime.datetime.now().astimezone()

    log("building")
    tg_exe = build_tensorgrad(root, build, args.no_build)
    peers = {}        # peer -> its program for the shared workloads
    eager_peers = {}  # peer -> its program for the eager workload (in this repository's bench/)
    if not args.no_peers:
        torch_ok = torch_python_ok()
        script = os.path.join(args.peers, "peer_pytorch.py")
        if not torch_ok:
            log("skipping pytorch: /usr/bin/python3 cannot import torch (install Debian's python3-torch)")
        elif not os.path.exists(script):
            log(f"skipping pytorch: {script} not found")
        else:
            peers["pytorch"] = script
        if torch_ok and "eager" in workloads:
            eager_peers["pytorch"] = os.path.join(root, "bench", "eager_peer_pytorch.py")
        exe = build_libtorch(args.peers, build)
        if exe:
            peers["libtorch"] = exe
        if "eager" in workloads:
            exe = build_libtorch(args.peers, build, src=os.path.join(root, "bench", "eager_peer_libtorch"),
                                 name="eager_peer_libtorch", subdir="eager-peer-libtorch",
                                 what="libtorch's eager peer")
            if exe:
                eager_peers["libtorch"] = exe
        exe = build_dlib(args.peers, build)
        if exe:
            peers["dlib"] = exe
        if "llama" in workloads:
            script = os.path.join(root, "tests", "llama_js", "bench.mjs")
            if shutil.which("node") is None:
                log("skipping llama.cpp: node is not on PATH (Node.js 20 or later)")
            elif not os.path.isdir(os.path.join(root, "tests", "llama_js", "node_modules")):
                log("skipping llama.cpp: run NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --prefix tests/llama_js "
                    "--ignore-scripts --omit=optional")
            else:
                peers["llama.cpp"] = script
        if "pytorch" in peers and any(w in workloads for w in ("mlp", "cnn", "resnet")) and not os.path.isdir("/usr/share/datasets/fashion-mnist"):
            log("note: PyTorch's mlp reads /usr/share/datasets/fashion-mnist, which is missing; its mlp will fail")

    if "llama" in workloads:  # the files of llama.cpp's rows, written once before the rounds
        os.makedirs(LLAMA_DIR, exist_ok=True)
        run([tg_exe, "--benchmark_filter=^llama_write/"], env={"TG_LLAMA_DIR": LLAMA_DIR})

    # The peers that have a program for at least one of the chosen workloads.
    impls = ["tensorgrad"] + [p for p in PEERS if any(
        (eager_peers if w == "eager" else peers).get(p) and w in PEER_WORKLOADS[p] for w in workloads)]
    values = {}  # (row, impl) -> [value per round]
    loads = {}   # (row, impl) -> [share of the CPUs other processes used, per round]
    failures = []
    for r in range(rounds):
        order = impls if r % 2 == 0 else list(reversed(impls))
        for w in workloads:
            for impl in order:
                exe = None
                if impl != "tensorgrad":
                    if w not in PEER_WORKLOADS[impl]:
                        continue  # e.g. peer_dlib has no predict or eager workload
                    exe = (eager_peers if w == "eager" else peers).get(impl)
                    if exe is None:
                        continue
                log(f"[round {r + 1}/{rounds}] {w}: {impl}")
                before = wait_for_quiet(args.wait_idle)
                if before is not None and before >= 0.15:
                    log(f"  machine still busy ({100 * before:.0f}% of CPUs) after waiting {args.wait_idle:.0f} s")
                try:
                    with LoadMeter() as meter:
                        got = tensorgrad_run(tg_exe, w, args.threads, reps) if impl == "tensorgrad" \
                            else peer_run(impl, exe, w, args.threads)
                except (RuntimeError, KeyError, ValueError) as e:
                    msg = f"{impl} {w} (round {r + 1}) failed: {str(e)[:500]}"
                    log("  " + msg)
                    failures.append(msg)
                    continue
                for row, v in got.items():
                    values.setdefault((row, impl), []).append(v)
                    loads.setdefault((row, impl), []).append(meter.others)
                    others = "?" if meter.others is None else f"{100 * meter.others:.0f}%"
                    log(f"  {row}: {fmt(v)} {TARGETS[row][1]} (other processes: {others} of the CPUs)")

    m = machine()
    rev = revision(root)
    rows = [row for row in ROWS if any(k[0] == row for k in values)]
    med = {k: statistics.median(v) for k, v in values.items()}
    out = []
    out.append(f"command: {command}")
    out.append(f"date: {started.strftime('%Y-%m-%d %H:%M %Z')}; machine: {m['nproc']} CPUs, {m['cpu']}; "
               f"threads: {args.threads}; rounds: {rounds}")
    shown = [p for p in PEERS if p in peers or p in eager_peers]
    out.append(f"tensorgrad: {rev}; peers: {', '.join(shown) if shown else 'none'}")
    out.append("")
    header = ["workload", "unit", "target", "tensorgrad", "meets target"] + [
        f"{p} (ratio)" for p in PEERS if p in impls]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join(["---"] * len(header)) + "|")
    for row in rows:
        target, unit = TARGETS[row]
        tg = med.get((row, "tensorgrad"))
        if target is None:
            verdict = "-"
        else:
            verdict = "-" if tg is None else ("yes" if tg <= target else f"no ({tg / target:.2f}x the target)")
        cells = [row, unit, "-" if target is None else f"<= {fmt(target)}", fmt(tg), verdict]
        for p in PEERS:
            if p not in impls:
                continue
            pv = med.get((row, p))
            if pv is None:
                cells.append("-")
            elif tg:  # > 1: tensorgrad is faster, for times and rates alike
                ratio = tg / pv if row in HIGHER_IS_BETTER else pv / tg
                cells.append(f"{fmt(pv)} ({ratio:.2f})")
            else:
                cells.append(fmt(pv))
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("Medians over rounds; ratio = peer / tensorgrad for times, tensorgrad / peer for rates "
               "(> 1: tensorgrad is faster).")
    out.append("Per round (in brackets: share of the CPUs other processes used during that run):")
    for row in rows:
        for impl in impls:
            if (row, impl) in values:
                cells = []
                for v, ld in zip(values[(row, impl)], loads[(row, impl)]):
                    cells.append(fmt(v) + (" [?]" if ld is None else f" [{100 * ld:.0f}%]"))
                out.append(f"  {row:16s} {impl:10s} " + ", ".join(cells))
    skipped = [p for p in PEERS if p not in peers and p not in eager_peers]
    if skipped and not args.no_peers:
        out.append("Skipped peers (package absent or build failed): " + ", ".join(skipped))
    if failures:
        out.append("Failures:")
        out.extend("  " + f for f in failures)
    print("\n".join(out))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
