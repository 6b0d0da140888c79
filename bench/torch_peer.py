#!/usr/bin/env python3
"""torch_peer.py: PyTorch's embedding_bag on the GPU forward benchmark's shapes, the peer our
kernels are quoted against. Not a reference for numerics (its order is not the normative one).

All T tables are concatenated into one weight; one embedding_bag call (mode sum) covers every
bag. Effective GB/s uses the same byte formula as bench/gpu_forward_bench.c:
(B*T*L*D*2 + B*T*D*4) / time, median of 20 CUDA-event timings after warm-up.
"""
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the GPU host has both; elsewhere say so and stop
    print(f"SKIP: {e}")
    sys.exit(0)

SHAPES = [  # name, T, B, E, D, L, zipf alpha (0 = uniform)
    ("F1", 32, 65536, 1_000_000, 128, 32, 0),
    ("F2", 8, 131072, 1_000_000, 256, 64, 0),
    ("F3", 64, 16384, 100_000, 64, 8, 0),
    ("F4", 16, 32768, 100_000, 128, 20, 1.15),
    ("S1", 1, 65536, 50, 128, 128, 0),
]


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
