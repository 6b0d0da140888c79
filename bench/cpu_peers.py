#!/usr/bin/env python3
"""cpu_peers.py: the CPU reference's benchmarks beside the CPU peers a user would pick instead
(torch's embedding_bag, FBGEMM's CPU TBE), on the same batches. Not a test (no CTest, no CI) and
not a reference for numerics: peers are timed, and checked against our bits only where noted.

For each workload it runs our bench (bench/ref_*_bench), exports the very case it printed with
`tbecheck export`, times each installed peer at 1 and 2 threads on the exported arrays, then runs
our bench again, so a load change on a shared machine shows as a gap between ours-before and
ours-after. A peer that does not import is reported as skipped. Units are the benches':
forward GB/s = (N*D + total_B*D) * 2 bytes / time; backward lookups/s = lookups (index != -1) /
time of the backward + row-wise Adagrad update (FBGEMM: the .backward() call, its forward untimed).

usage: cpu_peers.py BUILD_DIR [--reps K] [--work fwd,bwd8,bwdfwd] [--tmp DIR]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

WORKS = {  # name: (our bench and its arguments, what it measures)
    "fwd": (["bench/ref_forward_bench"], "forward"),
    "bwd8": (["bench/ref_backward_bench", "--scale", "8"], "backward"),
    "bwdfwd": (["bench/ref_backward_bench", "--forward-shape"], "backward"),
}
PEER_REPS = 5


def ours(build, argv):
    """Runs one of our benches; returns (case text, {threads: figure})."""
    out = subprocess.run([os.path.join(build, argv[0])] + argv[1:], check=True,
                         capture_output=True, text=True).stdout
    case = re.search(r"^case: (.*?)(?: \((?:full scale|reduced scale|the forward's shape)\))?$",
                     out, re.M).group(1)
    figs = {}
    for m in re.finditer(r"^ref_forward, declared bytes / time\s+(\d+)\s+\S+\s+(\S+)$", out, re.M):
        figs[int(m.group(1))] = float(m.group(2))
    for m in re.finditer(r"^(\d+)(?:\s+\S+){6}\s+(\S+e[+-]\d+)$", out, re.M):
        figs[int(m.group(1))] = float(m.group(2))
    return case, figs


def export(build, case, tmp):
    """The case's arrays through `tbecheck export`, reused when tmp already holds that case."""
    d = os.path.join(tmp, re.sub(r"[^A-Za-z0-9=.]+", "_", case))
    man = os.path.join(d, "manifest.json")
    if not (os.path.exists(man) and json.load(open(man))["case"] == case):
        subprocess.run([os.path.join(build, "tbecheck"), "export", case, d], check=True)
    return d


def median_s(fn, reps):
    fn()  # warm-up
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return sorted(t)[len(t) // 2]


class Batch:
    """The exported arrays as torch tensors (indices and offsets int64, after the bounds check)."""

    def __init__(self, d, torch, np):
        ld = lambda name: np.load(os.path.join(d, name + ".npy"))
        self.man = json.load(open(os.path.join(d, "manifest.json")))
        self.dir = d
        self.E, self.D = ld("E"), ld("D")
        self.T = self.man["T"]
        if len(set(self.D)) != 1 or self.man["wdtype"] != "fp16" or self.man["pool"] != "sum" \
                or self.man["weighted"] or self.man["R"] or list(ld("feature_table_map")) != \
                list(range(self.T)):
            raise SystemExit("cpu_peers: the peers here take one D, fp16 SUM, unweighted, "
                             "fixed-batch cases with one table per feature")
        self.ld = ld
        self.weights = torch.from_numpy(ld("weights"))
        self.indices = torch.from_numpy(ld("ref_indices").astype(np.int64))
        self.offsets = torch.from_numpy(ld("ref_offsets").astype(np.int64))
        self.lookups = int((self.indices != -1).sum())
        self.N, self.total_B = self.man["N"], self.man["total_B"]
        self.fwd_bytes = (self.N + self.total_B) * int(self.D[0]) * 2


def peer_torch_forward(bt, torch, threads, reps):
    """torch.nn.functional.embedding_bag over one weight holding every table, rows offset by the
    table's first row (the same sequential fp32 sum per column as ours)."""
    F = torch.nn.functional
    D = int(bt.D[0])
    weight = bt.weights.view(-1, D)
    first = torch.from_numpy(bt.ld("table_offset")[:-1] // D)
    bags = (bt.offsets[1:] - bt.offsets[:-1]).view(bt.T, -1).sum(1)
    idx = bt.indices + torch.repeat_interleave(first, bags)
    torch.set_num_threads(threads)
    call = lambda: F.embedding_bag(idx, weight, bt.offsets[:-1], mode="sum")
    return bt.fwd_bytes / median_s(call, reps) / 1e9


def fbgemm_tbe(bt, torch, train):
    from fbgemm_gpu.split_embedding_configs import EmbOptimType as OptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, \
        PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import ComputeDevice, \
        SplitTableBatchedEmbeddingBagsCodegen
    man = bt.man
    specs = [(int(e), int(d), EmbeddingLocation.HOST, ComputeDevice.CPU)
             for e, d in zip(bt.E, bt.D)]
    kw = {}
    if train:
        if man["opt"] != "rowwise_adagrad" or man["wd"] != "none" or man["clip"] or man["sr"]:
            raise SystemExit("cpu_peers: the FBGEMM backward here is plain row-wise Adagrad")
        kw = dict(optimizer=OptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=man["lr"],
                  eps=man["eps"], stochastic_rounding=False)
    emb = SplitTableBatchedEmbeddingBagsCodegen(
        specs, weights_precision=SparseType.FP16, output_dtype=SparseType.FP32,
        pooling_mode=PoolingMode.SUM, device="cpu", **kw)
    with torch.no_grad():
        at = 0
        for w in emb.split_embedding_weights():
            w.view(-1).copy_(bt.weights[at:at + w.numel()])
            at += w.numel()
        if train:
            mom = torch.from_numpy(bt.ld("momentum"))
            at = 0
            for m in emb.split_optimizer_states():
                m[0].view(-1).copy_(mom[at:at + m[0].numel()])
                at += m[0].numel()
    return emb


def peer_fbgemm_forward(bt, torch, threads, reps):
    """FBGEMM's CPU forward; also counts the elements that differ from our ref_output."""
    import numpy as np
    emb = fbgemm_tbe(bt, torch, False)
    torch.set_num_threads(threads)
    with torch.no_grad():
        out = emb(bt.indices, bt.offsets)
        ref = bt.ld("ref_output").view(np.uint32)  # [B, T*D], as FBGEMM's output
        diff = int((out.numpy().reshape(-1).view(np.uint32) != ref).sum())
        s = median_s(lambda: emb(bt.indices, bt.offsets), reps)
    return bt.fwd_bytes / s / 1e9, f"{diff} elements differ from ours"


def peer_fbgemm_backward(bt, torch, threads, reps):
    """FBGEMM's CPU backward with the fused EXACT_ROWWISE_ADAGRAD update (weights change each
    call, which changes no time: the work is the same)."""
    emb = fbgemm_tbe(bt, torch, True)
    torch.set_num_threads(threads)
    grad = torch.from_numpy(bt.ld("grad_output")).view(-1, bt.T * int(bt.D[0]))  # [B, T*D]
    t = []
    for r in range(reps + 1):
        out = emb(bt.indices, bt.offsets)
        t0 = time.perf_counter()
        out.backward(grad)
        if r:
            t.append(time.perf_counter() - t0)
    return bt.lookups / sorted(t)[len(t) // 2], None


PEERS = {"forward": [("torch embedding_bag", peer_torch_forward),
                     ("FBGEMM CPU forward", peer_fbgemm_forward)],
         "backward": [("FBGEMM CPU backward+Adagrad", peer_fbgemm_backward)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", help="a release build directory (holds tbecheck and bench/)")
    ap.add_argument("--reps", type=int, default=1, help="rounds of ours-peers-ours per workload")
    ap.add_argument("--work", default="fwd,bwd8,bwdfwd", help="comma list of " + ",".join(WORKS))
    ap.add_argument("--tmp", default="/tmp/tbecheck_cpu_peers", help="where the exports go")
    a = ap.parse_args()
    try:
        import numpy as np
        import torch
        versions = f"torch {torch.__version__}"
        try:
            import fbgemm_gpu
            versions += f", fbgemm_gpu {fbgemm_gpu.__version__}"
            fbgemm = None
        except ImportError as e:
            fbgemm = f"skipped: {e}"
    except ImportError as e:
        np = torch = None
        versions = f"no peers: {e}"
    print(f"# {versions}; {os.uname().nodename}, {os.cpu_count()} CPUs; "
          f"{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    for name in a.work.split(","):
        argv, kind = WORKS[name]
        unit = "GB/s" if kind == "forward" else "lookups/s"
        for rep in range(a.reps):
            case, before = ours(a.build, argv)
            print(f"\n## {name} round {rep + 1}: {case} ({unit}, threads 1 / 2)", flush=True)
            print(f"ours (before)                 {before[1]:10.4g} / {before[2]:10.4g}")
            bt = Batch(export(a.build, case, a.tmp), torch, np) if torch else None
            for peer, fn in PEERS[kind]:
                if not torch or (fbgemm and peer.startswith("FBGEMM")):
                    print(f"{peer:29} {fbgemm if torch else versions}")
                    continue
                res = [fn(bt, torch, n, PEER_REPS) for n in (1, 2)]
                res = [r if isinstance(r, tuple) else (r, None) for r in res]
                note = res[0][1] or ""
                print(f"{peer:29} {res[0][0]:10.4g} / {res[1][0]:10.4g}  {note}", flush=True)
            del bt
            _, after = ours(a.build, argv)
            print(f"ours (after)                  {after[1]:10.4g} / {after[2]:10.4g}")
            print(f"# {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}",
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
