#!/usr/bin/env python3
"""torch_peer.py: PyTorch's embedding_bag on the GPU forward benchmark's shapes (read from
cases/bench.cases, the benchmarks' one workload file), the peer our kernels are quoted against.
Not a reference for numerics (its order is not the normative one).

All T tables are concatenated into one weight; one embedding_bag call (mode sum) covers every
bag. Effective GB/s uses the same byte formula as bench/gpu_forward_bench.c:
(B*T*L*D*2 + B*T*D*4) / time, median of 20 CUDA-event timings after warm-up.
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the GPU host has both; elsewhere say so and stop
    print(f"SKIP: {e}")
    sys.exit(0)

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cases", "bench.cases")


def bench_shapes(names):
    """(name, T, B, E, D, L, zipf alpha or 0) of each named shape of cases/bench.cases (the line
    whose comment starts with the name and a colon), from its keys; a shape these peers cannot
    run (a list of E or D, a range of L) is refused."""
    found = {}
    with open(CASES) as f:
        for line in f:
            text, _, comment = line.partition("#")
            name = comment.strip().split(":", 1)[0]
            if text.strip() and name in names:
                found[name] = dict(t.split("=", 1) for t in text.split())
    shapes = []
    for name in names:
        k = found[name]  # a KeyError names a shape missing from the file
        dist = k.get("dist", "uniform")
        alpha = float(dist.split(":")[1]) if dist.startswith("zipf:") else 0
        shapes.append((name, int(k.get("T", 1)), int(k["B"]), int(k["E"]), int(k["D"]),
                       int(k["L"]), alpha))
    return shapes


SHAPES = bench_shapes(["F1", "F2", "F3", "F4", "S1"])


def zipf_rows(rng, alpha, E, n):
    """Rows 0..E-1 with P(k) proportional to 1/(k+1)^alpha (row 0 hottest)."""
    p = 1.0 / np.arange(1, E + 1, dtype=np.float64) ** alpha
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(n)), E - 1)


def main():
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device for torch")
        return
    dev = torch.device("cuda")
    rng = np.random.default_rng(1)
    print(f"# torch {torch.__version__} embedding_bag on {torch.cuda.get_device_name()}")
    print(f"{'':3} {'torch ms':>10} {'GB/s':>9}")
    for name, T, B, E, D, L, alpha in SHAPES:
        weight = torch.randn(T * E, D, device=dev, dtype=torch.float16)
        n = T * B * L
        if alpha:
            rows = torch.from_numpy(zipf_rows(rng, alpha, E, n)).to(dev)
        else:
            rows = torch.randint(0, E, (n,), device=dev)
        table = torch.arange(T, device=dev).repeat_interleave(B * L)
        indices = rows + table * E
        offsets = torch.arange(0, n, L, device=dev)
        times = []
        for i in range(23):
            start, stop = torch.cuda.Event(True), torch.cuda.Event(True)
            start.record()
            F.embedding_bag(indices, weight, offsets, mode="sum")
            stop.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(start.elapsed_time(stop))
        ms = sorted(times)[len(times) // 2]
        gbs = (B * T * L * D * 2 + B * T * D * 4) / (ms * 1e-3) / 1e9
        print(f"{name:3} {ms:10.3f} {gbs:9.0f}", flush=True)
        del weight, rows, table, indices, offsets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
