"""tbecheck_ext_fbgemm.py: the ext.fbgemm engine: one tbecheck case through FBGEMM's
SplitTableBatchedEmbeddingBagsCodegen on the CPU. Not its order model (ref/backward_order.h).

The case's exact input bits go into FBGEMM's host weights and momentum; the module's own
bounds check repairs our index and offset tensors in place (their dtype is the module's, so it
casts nothing), its forward gives the output and its autograd backward the updated weights,
momentum and per-sample-weight gradient. What FBGEMM cannot express is refused with its reason
(refuse_unexpressible), never approximated.
"""

import ctypes.util
import os
import pickle
import re
import signal
import subprocess
import sys
import types

import numpy as np
import torch

import fbgemm_gpu
from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
    BoundsCheckMode, ComputeDevice, EmbeddingLocation, PoolingMode)
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    SplitTableBatchedEmbeddingBagsCodegen)
from fbgemm_gpu.tbe.config.optimizer_config import WeightDecayMode

ORDER = "fbgemm_cpu"

SPARSE = {"fp32": SparseType.FP32, "fp16": SparseType.FP16, "bf16": SparseType.BF16}
TORCH_FLOAT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
POOL = {"sum": PoolingMode.SUM, "mean": PoolingMode.MEAN, "none": PoolingMode.NONE}
BOUNDS = {"fatal": BoundsCheckMode.FATAL, "warning": BoundsCheckMode.WARNING,
          "ignore": BoundsCheckMode.IGNORE, "none": BoundsCheckMode.NONE}
OPTIM = {"sgd": EmbOptimType.EXACT_SGD, "rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD}
DECAY = {"none": WeightDecayMode.NONE, "l2": WeightDecayMode.L2,
         "decouple": WeightDecayMode.DECOUPLE}
# FBGEMM's CPU bounds check (FATAL) fails through TORCH_CHECK(cond): "Expected cond to be true"
FATAL_CHECK = re.compile(r"Expected (num_indices == offsets_acc\[total_B\]|indices_start >= 0|"
                         r"indices_start <= indices_end|indices_end <= num_indices|idx >= 0|"
                         r"idx < num_rows) to be true")
# its forward kernels report a bad row as "Index p is out of bounds: -1, range 0 to E"
PRUNED = re.compile(r"out of bounds: -1\b")


def version():
    return f"fbgemm_gpu {fbgemm_gpu.__version__}, torch {torch.__version__.split('+')[0]}"


def refuse_unexpressible(m, D):
    """Raises NotImplementedError when FBGEMM's CPU TBE cannot run case m (table dims D)."""
    if m["wdtype"] == "bf16" or m["out_dtype"] == "bf16":
        raise NotImplementedError("FBGEMM's CPU forward dispatches fp32 and fp16 only: BF16 "
                                  "weights or output are not implemented for BFloat16")
    if any(int(d) % 4 for d in D):
        raise NotImplementedError("FBGEMM's TBE asserts every D is a multiple of 4")
    if m.get("sr") and m["wdtype"] != "fp32" and m.get("opt", "none") != "none":
        raise NotImplementedError("FBGEMM's CPU backward always rounds 16-bit weights to "
                                  "nearest: it has no stochastic rounding")


def to_torch(a, dtype_name=None):
    """A copy of numpy array a as a torch tensor; 16-bit floats keep their bits."""
    a = np.ascontiguousarray(a).copy()
    if dtype_name == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_numpy(t, dtype_name=None):
    """A flat numpy copy of torch tensor t; bf16 as its uint16 bits."""
    t = t.detach().contiguous().reshape(-1)
    if dtype_name == "bf16" or t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).copy()
    return t.numpy().copy()


def build_module(m, a, used):
    """The FBGEMM module of case m over the tables `used` (FBGEMM wants every table read by a
    feature), with the case's weights and momentum loaded bit for bit."""
    E, D = a["E"].astype(np.int64), a["D"].astype(np.int64)
    opt = m.get("opt", "none")
    clip = float(m.get("clip", 0) or 0)
    kw = {}
    if opt == "rowwise_adagrad":
        kw = dict(eps=float(m["eps"]), weight_decay=float(m["lambda"]),
                  weight_decay_mode=DECAY[m["wd"]])
    itype = torch.int32 if m["itype"] == "int32" else torch.int64
    new_id = {j: k for k, j in enumerate(used)}
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(int(E[j]), int(D[j]), EmbeddingLocation.HOST, ComputeDevice.CPU) for j in used],
        feature_table_map=[new_id[int(j)] for j in a["feature_table_map"]],
        weights_precision=SPARSE[m["wdtype"]], output_dtype=SPARSE[m["out_dtype"]],
        optimizer=OPTIM.get(opt, EmbOptimType.EXACT_SGD),
        learning_rate=float(m.get("lr", 0.0)), stochastic_rounding=False,
        gradient_clipping=clip > 0, max_gradient=clip if clip > 0 else 1.0,
        pooling_mode=POOL[m["pool"]], bounds_check_mode=BOUNDS[m["bounds"]],
        embedding_table_index_type=itype, embedding_table_offset_type=itype, **kw)
    toff = a["table_offset"]
    with torch.no_grad():
        for k, j in enumerate(used):
            rows = a["weights"][toff[j]:toff[j + 1]].reshape(E[j], D[j])
            tbe.split_embedding_weights()[k].copy_(to_torch(rows, m["wdtype"]))
        if opt == "rowwise_adagrad":
            rows_cumsum = np.concatenate([[0], np.cumsum(E)])
            for k, j in enumerate(used):
                mom = a["momentum"][rows_cumsum[j]:rows_cumsum[j + 1]]
                tbe.split_optimizer_states()[k][0].copy_(to_torch(mom))
    return tbe


def gather_backward(m, a, tbe, used, psw):
    """The updated weights (all tables, flat), momentum and psw gradient after backward."""
    E, toff = a["E"].astype(np.int64), a["table_offset"]
    got = {}
    weights = a["weights"].copy()
    for k, j in enumerate(used):
        weights[toff[j]:toff[j + 1]] = to_numpy(tbe.split_embedding_weights()[k], m["wdtype"])
    got["weights"] = weights
    if m["opt"] == "rowwise_adagrad":
        mom = a["momentum"].copy()
        rows_cumsum = np.concatenate([[0], np.cumsum(E)])
        for k, j in enumerate(used):
            mom[rows_cumsum[j]:rows_cumsum[j + 1]] = to_numpy(tbe.split_optimizer_states()[k][0])
        got["momentum"] = mom
    if psw is not None:
        got["psw_grad"] = to_numpy(psw.grad) if psw.grad is not None else np.zeros(
            psw.numel(), np.float32)
    return got


def run(case):
    m, a = case.manifest, case.arrays
    refuse_unexpressible(m, a["D"])
    if (m["R"] and m["itype"] == "int32") or (m["bounds"] == "none" and (a["indices"] == -1).any()):
        return run_apart(case)
    return run_here(case)


def run_apart(case):
    """run_here in a fresh interpreter under glibc's checking allocator, for the inputs FBGEMM
    was seen to corrupt its heap on (VBE with int32 indices; a pruned row read unchecked): a
    crash, or a corruption that would surface cases later, stays with this case. With the plain
    allocator the corruption aborted about 5 runs in 6 and went unseen in the rest; with
    MALLOC_CHECK_=3 (libc_malloc_debug) every corrupted free aborts, so the finding does not
    depend on the heap's layout. Where the library is missing, the child runs without it."""
    env = dict(os.environ)
    debug = ctypes.util.find_library("c_malloc_debug")
    if debug:
        env.update(LD_PRELOAD=debug, MALLOC_CHECK_="3")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--apart"], env=env,
                       input=pickle.dumps((case.manifest, case.arrays)), capture_output=True)
    if r.returncode < 0:
        sig = -r.returncode
        said = r.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"FBGEMM killed the process it ran in by signal {sig} "
                           f"({signal.Signals(sig).name}{': ' + said[-1] if said else ''}); "
                           "tbecheck ran it apart")
    try:
        kind, value = pickle.loads(r.stdout)
    except Exception:
        raise RuntimeError(f"the process tbecheck ran FBGEMM in exited {r.returncode} without "
                           f"a result: {r.stderr.decode(errors='replace')[-500:]}")
    if kind == "raised":
        raise RuntimeError(value)
    return value


def apart_main():
    """The child of run_apart: the case from stdin, ("ok", outputs) or ("raised", why) to
    stdout."""
    manifest, arrays = pickle.loads(sys.stdin.buffer.read())
    try:
        data = pickle.dumps(("ok", run_here(types.SimpleNamespace(manifest=manifest,
                                                                   arrays=arrays))))
    except BaseException as e:  # the parent raises it as the case's outcome
        data = pickle.dumps(("raised", f"{type(e).__name__}: {e}"))
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def run_here(case):
    m, a = case.manifest, case.arrays
    torch.set_num_threads(1)
    # the module's tables in the order features first read them: FBGEMM's CPU path wants its
    # feature_table_map non-decreasing (map=1,0 failed with sorted tables), which this gives
    # wherever each table's features are adjacent
    used = list(dict.fromkeys(int(j) for j in a["feature_table_map"]))
    tbe = build_module(m, a, used)
    indices, offsets = to_torch(a["indices"]), to_torch(a["offsets"])
    backward = m.get("opt", "none") != "none"
    psw = None
    if m["weighted"]:
        psw = to_torch(a["per_sample_weights"]).requires_grad_(backward)
    vbe = {}
    if m["R"]:
        vbe["batch_size_per_feature_per_rank"] = a["B_vbe"].astype(int).tolist()
    try:
        out = tbe(indices, offsets, per_sample_weights=psw, **vbe)
    except RuntimeError as err:
        return failed_forward(m, err, indices, offsets, tbe)
    got = bounds_outputs(indices, offsets, tbe, m)
    got["output"] = to_numpy(out, m["out_dtype"])
    if backward:
        grad = to_torch(a["grad_output"], m["out_dtype"]).reshape(out.shape)
        out.backward(grad)
        got.update(gather_backward(m, a, tbe, used, psw))
    return got


def outputs_of(m):
    """The names of the float outputs case m asks for."""
    opt = m.get("opt", "none")
    names = ["output"]
    if opt != "none":
        names.append("weights")
    if opt == "rowwise_adagrad":
        names.append("momentum")
    if opt != "none" and m["weighted"]:
        names.append("psw_grad")
    return names


def bounds_outputs(indices, offsets, tbe, m):
    """The bounds check's results: our tensors, repaired in place, and its counter (its own
    rule in WARNING mode: tbecheck holds it to the fbgemm_cpu model, ref/forward_order.h)."""
    return {"indices": indices.numpy().copy(), "offsets": offsets.numpy().copy(),
            "warnings": int(tbe.bounds_check_warning[0])}


def failed_forward(m, err, indices, offsets, tbe):
    """The outputs of a forward that raised, when the cause is one FBGEMM means: its FATAL
    bounds check (a TORCH_CHECK that names no coordinates), or a pruned (-1) index, which its
    training kernels reject in every mode after the bounds check has run. Else re-raises."""
    text = " ".join(str(err).split())
    got = bounds_outputs(indices, offsets, tbe, m)
    if m["bounds"] == "fatal" and FATAL_CHECK.search(text):
        got.setdefault("declined", {})["offender"] = (
            "FBGEMM's FATAL check raises a bare TORCH_CHECK naming no (feature, bag, position, "
            "value): " + FATAL_CHECK.search(text)[0])
        return got
    if PRUNED.search(text) and bool((indices == -1).any()):
        # TBE_SEMANTICS 2: a pruned row is valid input that contributes nothing
        why = "FBGEMM's CPU training forward rejects a pruned (-1) index: " + text[:120]
        got["raised"] = {name: why for name in outputs_of(m)}
        return got
    raise err


if __name__ == "__main__" and sys.argv[1:] == ["--apart"]:
    apart_main()
