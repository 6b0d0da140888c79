"""tbe_oracle.py: the NumPy oracle, a second and independent implementation of the bounds check
and forward of TBE_SEMANTICS.md (sections 1-3), written from the spec and not from ref/*.c.
Not the cross-check driver (check.py), which runs tbecheck's export and compares against this.

Accumulation order (section 3): for every bag, per column, positions in increasing p, one at a
time, starting from +0. FP32 weights accumulate in fp64 (acc + r, or fl64(w*r + acc), which is
fma because w*r of two fp32 values is exact in fp64); FP16/BF16 weights accumulate in fp32
(acc + r as an fp32 add, or a correctly rounded fp32 fma emulated in fp64 with round-to-odd).
A -1 position is skipped but counts in L. MEAN multiplies the sum by 1/L computed in the
accumulator's precision. The store rounds the accumulator once, to nearest even, into the output
dtype. The code vectorises across bags and columns: step k adds the k-th position of every bag
that has one, which keeps each bag's order exactly.

The first offender of a FATAL bounds check is reported as (feature, bag, position, value):
- offset offender, bag b < total_B: feature = the bag's feature, bag = b; position is the
  offsets element the bag is bad for and value its original value: b when start < 0; b + 1 when
  end > N or start > end (the end is what the repair raises), except for the last bag, whose end
  is N, so start > end means start > N and names position b.
- the last offset (offsets[total_B] != N): feature = -1, bag = total_B, position = total_B.
- index offender: feature and bag of the bag holding it, position = its position in indices,
  value = the invalid index.
Positions before the (repaired) offsets[0] belong to no bag: the spec counts invalid indices
over the repaired bags, so they are neither checked nor repaired, and pooling NONE stores zeros
for their rows.

check.py compares feature and bag for offset offenders (the position/value choice for an offset
is not fixed by the spec) and all four fields for index offenders.
"""

import json
import os

import numpy as np

STATUS_OK = "ok"
STATUS_BOUNDS = "bounds check failed"

# (mantissa bits, minimum normal exponent, maximum exponent) of each output dtype
FORMATS = {"fp32": (23, -126, 127), "fp16": (10, -14, 15), "bf16": (7, -126, 127)}

WEIGHT_NPY = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}


def round_to_format(x, fmt):
    """Rounds float64 values to the nearest value of `fmt` (ties to even), once, from the exact
    double: subnormals of the format are kept, values past the largest finite one become Inf,
    NaN stays NaN. Returns float64 values that are exactly representable in the format."""
    mant, emin, emax = FORMATS[fmt]
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    finite = np.isfinite(a)
    a_f = np.where(finite, a, 0.0)
    _, ex = np.frexp(a_f)  # a = f * 2^ex, f in [0.5, 1): the leading bit is 2^(ex - 1)
    quantum = np.maximum(ex - 1, emin) - mant  # exponent of the format's ulp at a
    n = np.rint(np.ldexp(a_f, -quantum))  # exact scaling, then round half to even
    r = np.ldexp(n, quantum)
    r = np.where(r >= 2.0 ** (emax + 1), np.inf, r)
    r = np.where(finite, r, a)
    return np.copysign(r, x)


def store_bits(x, fmt):
    """The output dtype's bits of float64 values x after round_to_format: uint32 for fp32,
    uint16 for fp16 and bf16 (bf16 = the top half of the fp32 encoding)."""
    r = round_to_format(x, fmt)
    if fmt == "fp16":
        return r.astype(np.float16).view(np.uint16)
    bits = r.astype(np.float32).view(np.uint32)
    if fmt == "bf16":
        nan = np.isnan(r)
        return np.where(nan, (bits >> 16) | 0x40, bits >> 16).astype(np.uint16)
    return bits


def fma_f32(a, b, c):
    """Correctly rounded fp32 fma(a, b, c) for fp32 arrays. a*b is exact in fp64 (24 + 24 bits);
    s = a*b + c rounds in fp64, TwoSum recovers the error, and rounding s to odd (forcing the
    last bit to 1 when inexact) before the cast to fp32 makes the two roundings one, since 53 >=
    24 + 2."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    fix = (err != 0) & even & np.isfinite(s)
    if np.any(fix):
        s = s.copy()
        s[fix] = np.nextafter(s[fix], np.where(err[fix] > 0, np.inf, -np.inf))
    return s.astype(np.float32)


def weights_as_float(bits, wdtype):
    """Weights widened exactly: fp32 -> float64, fp16 and bf16 -> float32."""
    if wdtype == "fp32":
        return bits.astype(np.float64)
    if wdtype == "fp16":
        return bits.astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


class Layout:
    """Section 1's shapes: bags per feature (fixed or VBE), each bag's feature and first output
    element, and the output size."""

    def __init__(self, T, B, D_feat, B_vbe=None, pooled=True, N=0):
        self.T = T
        self.D_feat = np.asarray(D_feat, dtype=np.int64)
        self.D_offsets = np.concatenate([[0], np.cumsum(self.D_feat)]).astype(np.int64)
        self.total_D = int(self.D_offsets[-1])
        if B_vbe is None:
            per_feat = np.full(T, B, dtype=np.int64)
        else:
            B_vbe = np.asarray(B_vbe, dtype=np.int64).reshape(T, -1)
            per_feat = B_vbe.sum(axis=1)
        self.B_offsets = np.concatenate([[0], np.cumsum(per_feat)]).astype(np.int64)
        self.total_B = int(self.B_offsets[-1])
        self.bag_feature = np.repeat(np.arange(T, dtype=np.int64), per_feat)
        self.bag_out = None
        if not pooled:
            self.out_elems = N * (int(self.D_feat[0]) if T else 0)
        elif B_vbe is None:
            bag = np.arange(self.total_B, dtype=np.int64)
            sample = bag - self.B_offsets[self.bag_feature]
            self.bag_out = sample * self.total_D + self.D_offsets[self.bag_feature]
            self.out_elems = B * self.total_D
        else:
            # blocks ordered rank, then feature; within a feature bags are rank, then sample
            self.bag_out = np.zeros(self.total_B, dtype=np.int64)
            R = B_vbe.shape[1]
            rank_first = self.B_offsets[:-1, None] + np.cumsum(B_vbe, axis=1) - B_vbe
            pos = 0
            for r in range(R):
                for t in range(T):
                    n, d = int(B_vbe[t, r]), int(self.D_feat[t])
                    first = int(rank_first[t, r])
                    self.bag_out[first:first + n] = pos + d * np.arange(n, dtype=np.int64)
                    pos += n * d
            self.out_elems = pos


def bounds_check(offsets, indices, E_feat, bag_feature, mode):
    """Section 2. offsets [total_B + 1] and indices [N] (any integer dtype), E_feat [T] rows of
    each feature's table, bag_feature [total_B]. Returns (offsets, indices, warnings, offender)
    with the repaired copies in the input dtypes; offender is None or a dict with kind
    ("offset" or "index"), feature, bag, position, value (FATAL only; see the module doc)."""
    o = np.asarray(offsets).astype(np.int64)
    idx = np.asarray(indices).astype(np.int64)
    E_feat = np.asarray(E_feat, dtype=np.int64)
    bag_feature = np.asarray(bag_feature, dtype=np.int64)
    N = len(idx)
    total_B = len(o) - 1
    if mode == "none":
        return offsets.copy(), indices.copy(), 0, None

    starts = o[:-1]
    ends = o[1:].copy()
    if total_B:
        ends[-1] = N  # the last bag ends at N, whatever offsets[total_B] says
    bad_bag = (starts < 0) | (starts > ends) | (ends > N)
    last_bad = bool(o[-1] != N)

    if mode == "fatal":
        if bad_bag.any():
            b = int(np.argmax(bad_bag))
            if starts[b] < 0 or (b == total_B - 1 and starts[b] > ends[b]):
                pos = b
            else:
                pos = b + 1
            return offsets.copy(), indices.copy(), 0, dict(
                kind="offset", feature=int(bag_feature[b]), bag=b, position=pos,
                value=int(o[pos]))
        if last_bad:
            return offsets.copy(), indices.copy(), 0, dict(
                kind="offset", feature=-1, bag=total_B, position=total_B, value=int(o[-1]))
        rep = o
    else:
        rep = np.minimum(o, N)
        rep[0] = max(rep[0], 0)
        rep = np.maximum.accumulate(rep)
        rep[-1] = N

    # every position from rep[0] to N lies in exactly one (repaired) bag
    first = int(rep[0]) if total_B else N
    lengths = np.diff(rep)
    pos_bag = np.repeat(np.arange(total_B, dtype=np.int64), lengths)
    pos_E = E_feat[bag_feature[pos_bag]]
    in_bags = idx[first:]
    invalid = (in_bags != -1) & ((in_bags < 0) | (in_bags >= pos_E))

    if mode == "fatal":
        if invalid.any():
            k = int(np.argmax(invalid))
            b = int(pos_bag[k])
            return offsets.copy(), indices.copy(), 0, dict(
                kind="index", feature=int(bag_feature[b]), bag=b, position=first + k,
                value=int(in_bags[k]))
        return offsets.copy(), indices.copy(), 0, None

    new_idx = np.asarray(indices).copy()
    new_idx[first:][invalid] = 0
    warnings = 0
    if mode == "warning":
        warnings = int(last_bad) + int(bad_bag.sum()) + int(invalid.sum())
    return rep.astype(offsets.dtype), new_idx, warnings, None


def forward(tables, layout, offsets, indices, psw, pool, out_dtype):
    """Section 3 on checked inputs (indices in range or -1). tables: a list per feature of
    (E, D) float arrays (float64 for FP32 weights, float32 otherwise). Returns the output's bits
    (uint32 for fp32, uint16 for fp16/bf16), 1-D of layout.out_elems."""
    o = np.asarray(offsets).astype(np.int64)
    idx = np.asarray(indices).astype(np.int64)
    N = len(idx)
    if pool == "none":
        D = int(layout.D_feat[0]) if layout.T else 0
        out = np.zeros((N, D), dtype=np.float64)
        first = int(o[0]) if layout.total_B else N
        feat = layout.bag_feature[np.repeat(np.arange(layout.total_B), np.diff(o))]
        for t in range(layout.T):
            p = first + np.nonzero((feat == t) & (idx[first:] != -1))[0]
            out[p] = tables[t][idx[p]]
        return store_bits(out.reshape(-1), out_dtype)

    out = np.zeros(layout.out_elems, dtype=np.float64)
    for t in range(layout.T):
        W = tables[t]
        D = W.shape[1]
        acc_t = W.dtype
        bags = np.arange(layout.B_offsets[t], layout.B_offsets[t + 1])
        starts, L = o[bags], o[bags + 1] - o[bags]
        acc = np.zeros((len(bags), D), dtype=acc_t)
        for k in range(int(L.max()) if len(L) else 0):
            p = starts + k
            live = np.nonzero((L > k) & (idx[np.minimum(p, N - 1)] != -1))[0]
            if not len(live):
                continue
            rows = W[idx[p[live]]]
            if psw is None:
                acc[live] = acc[live] + rows
            elif acc_t == np.float64:
                w = psw[p[live]].astype(np.float64)[:, None]
                acc[live] = acc[live] + w * rows  # w*rows exact in fp64: this is fma
            else:
                w = np.broadcast_to(psw[p[live]][:, None], rows.shape)
                acc[live] = fma_f32(w, rows, acc[live])
        if pool == "mean":
            nz = L > 0
            inv = (acc_t.type(1) / L[nz].astype(acc_t))[:, None]
            acc[nz] = acc[nz] * inv
        cols = layout.bag_out[bags][:, None] + np.arange(D)
        out[cols] = acc.astype(np.float64)
    return store_bits(out, out_dtype)


class Result:
    """What the oracle computes for one exported case."""

    def __init__(self, layout, status, offsets, indices, warnings, offender, output_bits):
        self.layout = layout
        self.status = status
        self.offsets = offsets
        self.indices = indices
        self.warnings = warnings
        self.offender = offender
        self.output_bits = output_bits


def load_case(path):
    """Reads an exported case directory (harness/store/export.h): the manifest and input arrays."""
    with open(os.path.join(path, "manifest.json")) as f:
        m = json.load(f)
    arrays = {}
    for name in ("weights", "table_offset", "E", "D", "feature_table_map", "indices",
                 "offsets", "B_vbe", "per_sample_weights", "ref_indices", "ref_offsets",
                 "ref_output", "grad_output", "momentum", "ref_weights", "ref_momentum",
                 "ref_psw_grad"):
        p = os.path.join(path, name + ".npy")
        if os.path.exists(p):
            arrays[name] = np.load(p, allow_pickle=False)
    return m, arrays


def run_case(m, a):
    """Runs the bounds check and forward of the case read by load_case; returns a Result."""
    T = m["T"]
    ftm = a["feature_table_map"].astype(np.int64)
    E, D, toff = a["E"].astype(np.int64), a["D"].astype(np.int64), a["table_offset"]
    wdtype = m["wdtype"]
    w = a["weights"]
    if w.dtype != WEIGHT_NPY[wdtype]:
        raise ValueError(f"weights.npy has dtype {w.dtype}, manifest says {wdtype}")
    w = weights_as_float(w, wdtype)
    tables = [w[toff[j]:toff[j] + E[j] * D[j]].reshape(E[j], D[j]) for j in ftm]
    pooled = m["pool"] != "none"
    layout = Layout(T, m["B"], D[ftm], a.get("B_vbe") if m["R"] else None, pooled,
                    len(a["indices"]))
    offs, idx, warnings, offender = bounds_check(a["offsets"], a["indices"], E[ftm],
                                                 layout.bag_feature, m["bounds"])
    if offender is not None:
        return Result(layout, STATUS_BOUNDS, offs, idx, warnings, offender, None)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # IEEE results wanted
        out = forward(tables, layout, offs, idx, a.get("per_sample_weights"), m["pool"],
                      m["out_dtype"])
    return Result(layout, STATUS_OK, offs, idx, warnings, None, out)
