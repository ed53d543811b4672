"""PyTorch's side of bench/io_bench.cpp's save-load measurement, for context:
torch.save / torch.load of the same 784-500-10 MLP with its AdamW state
(after one step), medians of N. torch.save does not fsync; the fsync of the
file and its folder is timed apart, as io_bench does.
Usage: /usr/bin/python3 bench/io_peer_pytorch.py [--dir DIR] [--repeats N]"""
import argparse
import os
import statistics
import tempfile
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--repeats", type=int, default=51)
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 500), torch.nn.ReLU(), torch.nn.Linear(500, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = torch.nn.functional.cross_entropy(model(torch.zeros(500, 784)), torch.zeros(500, dtype=torch.long))
    loss.backward()
    opt.step()
    path = os.path.join(a.dir, "io_peer_mlp.pt")
    for with_optimizer in (True, False):
        state = {"model": model.state_dict()}
        if with_optimizer:
            state["optimizer"] = opt.state_dict()
        save, fsync, load = [], [], []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            torch.save(state, path)
            t1 = time.perf_counter()
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            d = os.open(a.dir, os.O_RDONLY)
            os.fsync(d)
            os.close(d)
            t2 = time.perf_counter()
            save.append(t1 - t0)
            fsync.append(t2 - t1)
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            torch.load(path)
            load.append(time.perf_counter() - t0)
        size = os.path.getsize(path) / 1e6
        what = "weights and AdamW state" if with_optimizer else "weights only"
        print(f"PyTorch 784-500-10 MLP, {what}, {size:.2f} MB, medians of {a.repeats}:")
        print(f"  torch.save {1e3 * statistics.median(save):.2f} ms (+ {1e3 * statistics.median(fsync):.2f} ms fsync of file and folder)")
        print(f"  torch.load {1e3 * statistics.median(load):.2f} ms")
    os.remove(path)


if __name__ == "__main__":
    main()
