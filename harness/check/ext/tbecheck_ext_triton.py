"""tbecheck_ext_triton.py: the ext.triton engine: one tbecheck case through torchrec's Triton TBE
(TritonTableBatchedEmbeddingBags) on a CUDA GPU. Not its order model (ref/forward_order.h).

torchrec's files come from the user's checkout, named by TBECHECK_TORCHREC (default: the
repository's .torchrec/, which git ignores); tbecheck ships none of its code. The published
module imports Meta-internal AMD kernels (ads_mkl) and a few fbgemm_gpu enums and CUDA ops;
STAND_INS below registers tbecheck's own versions of exactly those before the import, written
from their documented semantics (stable sort, run-length encoding, VBE offsets), so what runs
is torchrec's Triton code with tbecheck's host plumbing. The case's exact bits go into the
module's weight and momentum; its forward gives the output, its autograd backward (which
updates the weights in place) the new weights, momentum and per-sample-weight gradient.
What the module cannot express is refused with the reason (refusal()), never approximated.
Under Triton's interpreter (TRITON_INTERPRET=1, a plumbing test only: its numerics are NumPy's,
not the GPU's) the tensors stay on the CPU.
"""

import enum
import hashlib
import math
import os
import sys
import types

import numpy as np
import torch

ORDER = "triton"

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CHECKOUT = os.path.join(HERE, "..", "..", "..", ".torchrec")
MODULE_FILE = "torchrec/distributed/triton_tbe/triton_table_batched_embeddings.py"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
TORCH_FLOAT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
BACKWARD_OUTPUTS = ("weights", "momentum", "psw_grad")


# ---- stand-ins for what the published module imports but OSS does not have ----

class FeatureGateName(enum.Enum):
    """fbgemm_gpu.config's gate; DISABLE_OFFSETS_ADJUSTMENT off: bad offsets are repaired."""
    DISABLE_OFFSETS_ADJUSTMENT = "disable_offsets_adjustment"

    def is_enabled(self):
        return False


class EmbOptimType(enum.Enum):
    EXACT_SGD = "exact_sgd"
    EXACT_ROWWISE_ADAGRAD = "exact_row_wise_adagrad"


class SparseType(enum.Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    INT4 = "int4"
    INT2 = "int2"


class BoundsCheckMode(enum.IntEnum):
    """fbgemm's names and values; torchrec strips the V2_ prefix to pick the version."""
    FATAL = 0
    WARNING = 1
    IGNORE = 2
    NONE = 3
    V2_IGNORE = 4
    V2_WARNING = 5
    V2_FATAL = 6


class PoolingMode(enum.IntEnum):
    SUM = 0
    MEAN = 1
    NONE = 2


def info_bits(T):
    """(info_B_num_bits, info_B_mask) for T features: an info word is (t << bits) | b."""
    bits = 32 - int(math.floor(math.log2(max(T, 1)) + 1))
    return bits, (1 << bits) - 1


def get_infos_metadata(unused, B, T):
    """torch.ops.fbgemm.get_infos_metadata: the info-word split for T features, B bags."""
    bits, mask = info_bits(T)
    if B > mask:
        raise ValueError(f"B = {B} does not fit the {bits} bits left by T = {T}")
    return bits, mask


def as_int32_bits(v):
    """int64 tensor v (values < 2^32) as the int32 tensor with the same low 32 bits."""
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def transpose_embedding_input(hash_size_cumsum, total_hash_size_bits, indices, offsets,
                              nobag=False, vbe_b_t_map=None, info_B_num_bits=26,
                              info_B_mask=0x3FFFFFF):
    """torch.ops.fbgemm.transpose_embedding_input: linearize (hash_size_cumsum[t] + index),
    sort STABLY (a row's entries keep their position order), run-length encode. Returns
    (linear, linear_sorted, infos_sorted, runs, run_lengths, num_runs, cumulative_run_lengths),
    the last complete (length N + 1, the total repeated past num_runs), as fbgemm does."""
    N, total_B = indices.numel(), offsets.numel() - 1
    T = hash_size_cumsum.numel() - 1
    dev = indices.device
    lengths = (offsets[1:] - offsets[:-1]).to(torch.int64)
    bag = torch.repeat_interleave(torch.arange(total_B, device=dev), lengths)
    if vbe_b_t_map is not None:
        info = vbe_b_t_map.to(torch.int64)[bag] & 0xFFFFFFFF
        t = info >> info_B_num_bits
    else:
        B = total_B // T if T else 0
        t, b = bag // max(B, 1), bag % max(B, 1)
        info = (t << info_B_num_bits) | b
    linear = (hash_size_cumsum[t] + indices.to(torch.int64)).to(indices.dtype)
    linear_sorted, perm = torch.sort(linear, stable=True)
    runs, counts = torch.unique_consecutive(linear_sorted, return_counts=True)
    num_runs = runs.numel()
    run = torch.zeros(N, dtype=indices.dtype, device=dev)
    run[:num_runs] = runs
    run_lengths = torch.zeros(N, dtype=torch.int32, device=dev)
    run_lengths[:num_runs] = counts.to(torch.int32)
    cumulative = torch.full((N + 1,), N, dtype=torch.int32, device=dev)
    cumulative[0] = 0
    cumulative[1:num_runs + 1] = torch.cumsum(counts, 0).to(torch.int32)
    return (linear, linear_sorted, as_int32_bits(info[perm]), run, run_lengths,
            torch.tensor([num_runs], dtype=torch.int32, device=dev), cumulative)


def generate_vbe_metadata(offsets, batch_size_per_feature_per_rank, pooling_mode,
                          feature_dims_cpu, device):
    """fbgemm's Python generate_vbe_metadata: B_offsets (prefix over features of each
    feature's bags), per-feature rank prefixes, and the rank-major output block offsets."""
    Bfr = [list(map(int, row)) for row in batch_size_per_feature_per_rank]
    T, R = len(Bfr), len(Bfr[0]) if Bfr else 0
    D = [int(d) for d in feature_dims_cpu]
    per_feature = [sum(row) for row in Bfr]
    B_offsets = np.concatenate([[0], np.cumsum(per_feature)]).astype(np.int32)
    rank_offsets = np.array([np.concatenate([[0], np.cumsum(row)]) for row in Bfr], np.int32)
    sizes = [Bfr[t][r] * D[t] for r in range(R) for t in range(T)]
    out_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return types.SimpleNamespace(
        B_offsets=torch.from_numpy(B_offsets).to(device),
        B_offsets_rank_per_feature=torch.from_numpy(rank_offsets).to(device),
        output_offsets_feature_rank=torch.from_numpy(out_offsets).to(device),
        max_B=max(per_feature, default=0),
        max_B_feature_rank=max((b for row in Bfr for b in row), default=0),
        output_size=int(out_offsets[-1]))


def generate_vbe_metadata_op(B_offsets, B_offsets_rank_per_feature,
                             output_offsets_feature_rank, D_offsets, max_D, nobag,
                             max_B_feature_rank, info_B_num_bits, total_B):
    """torch.ops.fbgemm.generate_vbe_metadata: for bag b_t = B_offsets[t] + rank_offset[t][r]
    + b, its output offset output_offsets_feature_rank[r*T + t] + b*D_t and its info word
    (t << bits) | (rank_offset[t][r] + b)."""
    Bo, Bor = B_offsets.cpu().numpy(), B_offsets_rank_per_feature.cpu().numpy()
    oo, Do = output_offsets_feature_rank.cpu().numpy(), D_offsets.cpu().numpy()
    T, R = Bor.shape[0], Bor.shape[1] - 1
    row_out = np.zeros(total_B, np.int64)
    infos = np.zeros(total_B, np.int64)
    for t in range(T):
        for r in range(R):
            b = np.arange(Bor[t][r + 1] - Bor[t][r])
            b_t = Bo[t] + Bor[t][r] + b
            row_out[b_t] = oo[r * T + t] + b * (Do[t + 1] - Do[t])
            infos[b_t] = (t << info_B_num_bits) | (Bor[t][r] + b)
    dev = B_offsets.device
    return torch.from_numpy(row_out).to(dev), as_int32_bits(torch.from_numpy(infos)).to(dev)


def bounds_check_indices(*args, **kwargs):
    """Not stood in: refusal() keeps every case that would need it away."""
    raise NotImplementedError("tbecheck has no stand-in for fbgemm's bounds_check_indices")


def amd_only(*args, **kwargs):
    raise RuntimeError("an ads_mkl AMD kernel was called: tbecheck runs torchrec's NVIDIA path")


AMD_NAMES = ("_expand_long_runs", "_nbit_TBE_forward_kernel_16bits",
             "_nbit_TBE_forward_kernel_32bits", "triton_tbe_backward_long_run_apply_unweighted",
             "triton_tbe_backward_long_run_grad_accum_unweighted",
             "triton_tbe_backward_long_run_grad_accum_weighted",
             "triton_tbe_backward_short_run_unweighted",
             "triton_tbe_backward_short_run_weighted", "triton_tbe_forward_unweighted_kernel",
             "triton_tbe_forward_weighted_kernel")


def stub_module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    mod.__path__ = []  # a package, so submodules import
    sys.modules[name] = mod
    return mod


def install_stand_ins():
    """Registers the stand-ins (sys.modules entries and torch.ops.fbgemm attributes)."""
    amd = dict.fromkeys(AMD_NAMES, amd_only)
    amd["_FIXED_GRID"] = 65536
    for name in ("ads_mkl", "ads_mkl.ops", "ads_mkl.ops.triton", "ads_mkl.ops.triton.amd"):
        stub_module(name)
    stub_module("ads_mkl.ops.triton.amd.triton_table_batched_embeddings", **amd)
    stub_module("fbgemm_gpu", __version__="tbecheck stand-in")
    stub_module("fbgemm_gpu.config", FeatureGateName=FeatureGateName)
    stub_module("fbgemm_gpu.split_embedding_configs", EmbOptimType=EmbOptimType,
                SparseType=SparseType)
    stub_module("fbgemm_gpu.split_table_batched_embeddings_ops_common",
                BoundsCheckMode=BoundsCheckMode, PoolingMode=PoolingMode)
    stub_module("fbgemm_gpu.split_table_batched_embeddings_ops_training_common",
                generate_vbe_metadata=generate_vbe_metadata)
    ops = torch.ops.fbgemm  # a namespace object: attributes set here win over lookups
    ops.get_infos_metadata = get_infos_metadata
    ops.transpose_embedding_input = transpose_embedding_input
    ops.generate_vbe_metadata = generate_vbe_metadata_op
    ops.bounds_check_indices = bounds_check_indices


def load_torchrec():
    """torchrec's Triton TBE module from the checkout, imported over the stand-ins: (checkout,
    triton, module), once. version() calls it first, so a missing checkout or GPU makes the
    engine unavailable; the host-side rules below import without either (their own test)."""
    global LOADED
    if LOADED:
        return LOADED
    root = os.path.abspath(os.environ.get("TBECHECK_TORCHREC", DEFAULT_CHECKOUT))
    if not os.path.isfile(os.path.join(root, MODULE_FILE)):
        raise ImportError(f"no torchrec checkout with {MODULE_FILE} at {root} (set "
                          "TBECHECK_TORCHREC to one)")
    if not INTERPRETED and not torch.cuda.is_available():
        raise ImportError("needs a CUDA GPU (torchrec's Triton TBE is CUDA only)")
    install_stand_ins()
    # torchrec's package __init__ files import most of torchrec (and fbgemm_gpu's training
    # modules): the packages above triton_tbe/ are entered by their paths alone, so only the
    # Triton TBE's own files run, from a full checkout as from a copy of that folder
    for name in ("torchrec", "torchrec.distributed", "torchrec.distributed.triton_tbe"):
        stub_module(name).__path__ = [os.path.join(root, *name.split("."))]
    import triton
    import torchrec.distributed.triton_tbe.triton_table_batched_embeddings as ttbe
    LOADED = root, triton, ttbe
    return LOADED


LOADED = None
DEVICE = torch.device("cpu") if INTERPRETED else torch.device("cuda")


def blob_id(path):
    """The file's git blob id (what `git ls-tree` shows at a commit): names the exact version
    even in a plain copy of the files."""
    with open(path, "rb") as f:
        data = f.read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:12]


def version():
    root, triton, _ = load_torchrec()
    where = "Triton interpreter on the CPU" if INTERPRETED else torch.cuda.get_device_name()
    return (f"torchrec TritonTableBatchedEmbeddingBags ({MODULE_FILE} blob "
            f"{blob_id(os.path.join(root, MODULE_FILE))}, from {root}) with tbecheck's "
            f"stand-ins for ads_mkl and the fbgemm_gpu ops, triton {triton.__version__}, "
            f"torch {torch.__version__.split('+')[0]}, {where}")


# ---- what the module cannot express ----

def inputs_need_repair(m, a):
    """A description of the first thing a bounds check would repair, or None."""
    off, idx = a["offsets"].astype(np.int64), a["indices"].astype(np.int64)
    N = idx.size
    if off[-1] != N or (off.size > 1 and (off[0] < 0 or np.any(np.diff(off) < 0))):
        return "offsets that are not a non-decreasing partition of the indices"
    rows = a["E"].astype(np.int64)[a["feature_table_map"].astype(np.int64)]
    bad = (idx != -1) & ((idx < 0) | (idx >= np.repeat(rows_per_bag(m, a, rows), np.diff(off))))
    return "an index outside its table" if bad.any() else None


def rows_per_bag(m, a, rows_per_feature):
    """The number of rows of each bag's table (feature-major bags, VBE or not)."""
    if m["R"]:
        return np.repeat(rows_per_feature, a["B_vbe"].astype(np.int64).sum(axis=1))
    return np.repeat(rows_per_feature, m["B"])


def bounds_plan(m, a):
    """'fused' (torchrec's own Triton check, WARNING only), 'none' (the case asks for none),
    or 'skipped' (valid inputs whose check torchrec hands to fbgemm's CUDA op)."""
    if m["bounds"] == "none":
        return "none"
    if m["bounds"] == "warning" and not m["weighted"] and not m["R"]:
        return "fused"
    why = inputs_need_repair(m, a)
    if why:
        raise NotImplementedError(
            f"bounds={m['bounds']} on {why}: torchrec's fused check handles WARNING without "
            "per-sample weights or VBE only; this one is fbgemm's bounds_check_indices CUDA op, "
            "which tbecheck does not stand in for")
    return "skipped"


def refusal(m):
    """Why torchrec's Triton TBE cannot run case m, or None."""
    if m["pool"] != "sum":
        return f"pool={m['pool']}: torchrec's Triton TBE pools by SUM only"
    if m.get("opt", "none") == "none":
        return None
    if m["wd"] != "none":
        return f"wd={m['wd']}: torchrec's Triton TBE has no weight decay"
    if float(m["clip"]):
        return "clip: torchrec's Triton TBE has no gradient clipping"
    return None


def repaired_offsets(off, N):
    """The offsets the fused WARNING check leaves (the running clamp, ref/SEMANTICS.md 2): a
    partition of the N indices, so the bags torchrec's kernels read are these, whatever came in
    (valid offsets are unchanged)."""
    rep = np.maximum.accumulate(np.clip(off, 0, N))
    rep[-1] = N
    return rep


def refuse_pruned(m, a):
    """torchrec reads row -1 as the previous table's last row instead of skipping it: a defect
    tbecheck finds, so such cases run. Only a -1 of a feature of the first table is refused: it
    reads before the weight buffer, which no model can know (and may fault the GPU)."""
    idx = a["indices"]
    if not np.any(idx == -1):
        return
    off = repaired_offsets(a["offsets"].astype(np.int64), len(idx))
    first = a["table_offset"][a["feature_table_map"]] == 0
    bags_per_feature = (a["B_vbe"].sum(axis=1) if m["R"] else
                        np.full(m["T"], m["B"], np.int64))
    feature_of = np.repeat(np.repeat(np.arange(m["T"]), bags_per_feature), np.diff(off))
    if bool(np.any((idx == -1) & first[feature_of])):
        raise NotImplementedError("a pruned (-1) index of the first table: torchrec's Triton "
                                  "kernels read row -1, before the weight buffer")


# ---- conversions ----

def to_torch(a, dtype_name=None):
    """numpy array a as a torch tensor on DEVICE; 16-bit floats keep their bits."""
    a = np.ascontiguousarray(a).copy()
    if dtype_name == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(DEVICE)
    return torch.from_numpy(a).to(DEVICE)


def to_numpy(t):
    """torch tensor t flat on the host; bf16 as its uint16 bits."""
    t = t.detach().contiguous().reshape(-1).cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).copy()
    return t.numpy().copy()


def packed_weights(a):
    """The case's weights in torchrec's layout: tables back to back, E_j x D_j row-major."""
    E, D, toff = a["E"].astype(np.int64), a["D"].astype(np.int64), a["table_offset"]
    parts = [a["weights"][toff[j]:toff[j] + E[j] * D[j]] for j in range(E.size)]
    return np.concatenate(parts) if parts else a["weights"][:0]


def unpacked_weights(a, flat):
    """torchrec's flat weights back into the case's layout (untouched padding kept)."""
    E, D, toff = a["E"].astype(np.int64), a["D"].astype(np.int64), a["table_offset"]
    out, at = a["weights"].copy(), 0
    for j in range(E.size):
        n = int(E[j] * D[j])
        out[toff[j]:toff[j] + n] = flat[at:at + n]
        at += n
    return out


# ---- one case ----

def build_module(m, a, fused):
    """torchrec's module for case m with the case's weights and momentum, bit for bit."""
    opt = m.get("opt", "none")
    optim = EmbOptimType.EXACT_ROWWISE_ADAGRAD if opt == "rowwise_adagrad" else \
        EmbOptimType.EXACT_SGD
    tbe = load_torchrec()[2].TritonTableBatchedEmbeddingBags(
        [(int(e), int(d)) for e, d in zip(a["E"], a["D"])],
        feature_table_map=[int(j) for j in a["feature_table_map"]],
        weights_precision=TORCH_FLOAT[m["wdtype"]], output_dtype=TORCH_FLOAT[m["out_dtype"]],
        stochastic_rounding=bool(m.get("sr", 0)), learning_rate=float(m.get("lr", 0.01)),
        eps=float(m.get("eps", 0.1)), optimizer=optim, device=DEVICE,
        fused_bounds_check=fused)
    tbe.bounds_check_mode = BoundsCheckMode.V2_WARNING if fused else BoundsCheckMode.NONE
    if INTERPRETED:  # its forward event is a CUDA event
        tbe.record_forward_event = lambda: None
    with torch.no_grad():
        tbe.weight.copy_(to_torch(packed_weights(a), m["wdtype"]))
        if opt == "rowwise_adagrad":
            tbe.momentum.copy_(to_torch(a["momentum"]))
    return tbe


def run(case):
    m, a = case.manifest, case.arrays
    why = refusal(m)
    if why:
        raise NotImplementedError(why)
    plan = bounds_plan(m, a)
    backward = m.get("opt", "none") != "none"
    tbe = build_module(m, a, plan == "fused")
    indices, offsets = to_torch(a["indices"]), to_torch(a["offsets"])
    psw = None
    if m["weighted"]:
        psw = to_torch(a["per_sample_weights"]).requires_grad_(backward)
    vbe = a["B_vbe"].astype(int).tolist() if m["R"] else None
    refuse_pruned(m, a)  # no bounds check repairs a -1
    # sr=1: torchrec draws its rounding seed from torch's CPU generator (triton_tbe.md 5.4),
    # seeded by the case so a rerun rounds alike; its random stream is its own, not the spec's
    if m.get("sr"):
        torch.manual_seed(int(m["seed"]))
    out = tbe(indices, offsets, per_sample_weights=psw, batch_size_per_feature_per_rank=vbe)
    got = bounds_outputs(plan, indices, offsets, tbe)
    got["output"] = to_numpy(out)
    if backward:
        out.backward(to_torch(a["grad_output"], m["out_dtype"]).reshape(out.shape))
        got.update(backward_outputs(m, a, tbe, psw))
    dump(m, got)
    return got


def dump(m, got):
    """With TBECHECK_TRITON_DUMP=DIR, the raw outputs also go to DIR/<sha1 of the case>.npz (with
    the case's text): what fitting a model of the kernels' order offline starts from, beside the
    inputs `tbecheck export` writes for the same case."""
    where = os.environ.get("TBECHECK_TRITON_DUMP")
    if not where:
        return
    os.makedirs(where, exist_ok=True)
    name = hashlib.sha1(m["case"].encode()).hexdigest()[:16]
    arrays = {k: np.asarray(v) for k, v in got.items() if k != "declined"}
    np.savez(os.path.join(where, name + ".npz"), case=np.array(m["case"]), **arrays)


def bounds_outputs(plan, indices, offsets, tbe):
    """The bounds check's results: our tensors (repaired in place by the fused check) and the
    counter; declined where torchrec's check would have been fbgemm's op."""
    if plan == "skipped":
        why = ("torchrec runs this bounds check through fbgemm's bounds_check_indices CUDA op, "
               "which tbecheck does not stand in for (the inputs are valid: it ran unchecked)")
        return {"declined": dict.fromkeys(("indices", "offsets", "warnings"), why)}
    return {"indices": to_numpy(indices), "offsets": to_numpy(offsets),
            "warnings": int(tbe.bounds_check_warning[0])}


def backward_outputs(m, a, tbe, psw):
    """The weights (the case's layout), momentum and per-sample-weight gradient after the
    module's backward has updated them."""
    got = {"weights": unpacked_weights(a, to_numpy(tbe.weight))}
    if m["opt"] == "rowwise_adagrad":
        got["momentum"] = to_numpy(tbe.momentum)
    if psw is not None:
        got["psw_grad"] = to_numpy(psw.grad) if psw.grad is not None else \
            np.zeros(psw.numel(), np.float32)
    return got
