#!/usr/bin/env python3
"""torch_backward_peer.py: PyTorch's backward + row-wise Adagrad on the GPU backward benchmark's
shapes (bench/gpu_backward_bench.c), the peer our kernels are quoted against. Not a reference for
numerics: its order is not the normative one.

Per group of tables: embedding_bag (sum, sparse=True) forward (untimed), then timed: backward
into a sparse gradient, coalesce, and row-wise Adagrad in torch ops (m += mean(g^2); w -= lr /
(sqrt(m) + eps) * g). torch's coalesce fails past 2^31 nnz x D, so a shape is cut into groups of
tables (and, where one table is too big, of bags) under that; the times of the groups add up.
Median of 5 CUDA-event timings after one warm-up.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import F, bench_shapes, np, torch, zipf_rows  # noqa: E402 (SKIPs without torch)

SHAPES = bench_shapes(["F1", "F2", "F3", "F4", "PUB"])  # cases/bench.cases
LIMIT = 2**31 - 1


def group_ms(dev, rng, tables, E, D, bags, L, alpha):
    """Backward + Adagrad of `tables` tables with `bags` bags of L lookups each."""
    weight = torch.randn(tables * E, D, device=dev, dtype=torch.float16, requires_grad=True)
    momentum = torch.zeros(tables * E, device=dev)
    n = tables * bags * L
    if alpha:
        rows = torch.from_numpy(zipf_rows(rng, alpha, E, n)).to(dev)
    else:
        rows = torch.randint(0, E, (n,), device=dev)
    indices = rows + torch.arange(tables, device=dev).repeat_interleave(bags * L) * E
    offsets = torch.arange(0, n, L, device=dev)
    grad = torch.randn(tables * bags, D, device=dev, dtype=torch.float16)
    times = []
    for i in range(6):
        out = F.embedding_bag(indices, weight, offsets, mode="sum", sparse=True)
        weight.grad = None
        start, stop = torch.cuda.Event(True), torch.cuda.Event(True)
        start.record()
        out.backward(grad)
        g = weight.grad.coalesce()
        idx, vals = g.indices()[0], g.values().float()
        with torch.no_grad():
            momentum[idx] += (vals * vals).mean(1)
            mu = 0.01 / (momentum[idx].sqrt() + 1e-8)
            weight.index_add_(0, idx, (-mu[:, None] * vals).half())
        stop.record()
        torch.cuda.synchronize()
        if i:
            times.append(start.elapsed_time(stop))
    del weight, momentum, rows, indices, offsets, grad
    torch.cuda.empty_cache()
    return sorted(times)[len(times) // 2]


def main():
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device for torch")
        return
    dev = torch.device("cuda")
    rng = np.random.default_rng(1)
    only = sys.argv[1:]
    print(f"# torch {torch.__version__} sparse backward + coalesce + row-wise Adagrad on "
          f"{torch.cuda.get_device_name()}")
    print(f"{'':4} {'torch ms':>10} {'groups':>7}")
    for name, T, B, E, D, L, alpha in SHAPES:
        if only and name not in only:
            continue
        per_table = B * L * D
        tables = max(1, min(T, LIMIT // per_table))
        bag_parts = 1 if per_table <= LIMIT else -(-per_table // LIMIT)
        ms, groups = 0.0, 0
        for t0 in range(0, T, tables):
            for _ in range(bag_parts):
                ms += group_ms(dev, rng, min(tables, T - t0), E, D, B // bag_parts, L, alpha)
                groups += 1
        print(f"{name:4} {ms:10.3f} {groups:7d}", flush=True)


if __name__ == "__main__":
    main()
