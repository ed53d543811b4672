"""PyTorch's side of tensorgrad_bench's eager_step (issue 11): the eager small
step written by hand, as tensorgrad's ag API writes it. 4-64-64-2 ReLU MLP on
plain tensors with requires_grad (weights {in, out}, so x @ w1 matches
tensorgrad's matmul(x, w1)), batch 32, F.mse_loss, loss.backward(), then
under torch.no_grad() p.add_(p.grad, alpha=-lr) and p.grad = None per
parameter (zero_grad(set_to_none=True)). Every op runs when called (no
tracing, no torch.compile). Median of --steps individually timed steps after
200 warm-up steps; prints one JSON line as ../shared/bench/peer_pytorch.py.
Usage: /usr/bin/python3 bench/eager_peer_pytorch.py [--threads N] [--steps S]"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn.functional as F


def eager_step(args):
    torch.manual_seed(0)

    def param(shape, fan_in):  # uniform in +-1/sqrt(fan_in), as nn.Linear
        k = 1.0 / math.sqrt(fan_in)
        return torch.empty(*shape).uniform_(-k, k).requires_grad_()

    w1, b1 = param((4, 64), 4), param((64,), 4)
    w2, b2 = param((64, 64), 64), param((64,), 64)
    w3, b3 = param((64, 2), 64), param((2,), 64)
    params = [w1, b1, w2, b2, w3, b3]
    x, y = torch.randn(32, 4), torch.randn(32, 2)
    lr = 1e-2
    times = []
    for i in range(args.steps + 200):
        t0 = time.perf_counter()
        h = F.relu(x @ w1 + b1)
        h = F.relu(h @ w2 + b2)
        out = h @ w3 + b3
        loss = F.mse_loss(out, y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-lr)
                p.grad = None
        if i >= 200:
            times.append(time.perf_counter() - t0)
    return {"us_per_step_median": 1e6 * statistics.median(times), "steps": args.steps}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = eager_step(args)
    out.update({"peer": "pytorch " + torch.__version__, "workload": "eager", "threads": args.threads})
    print(json.dumps(out))
