"""tbe_oracle_backward.py: the NumPy oracle's backward and optimizers (TBE_SEMANTICS.md sections 4
and 5), written from the spec and not from ref/*.c. Not the forward (tbe_oracle.py).

Accumulation order (section 4): a lookup's contribution to column d is G[d] of its bag's slice
of grad_output (pooling NONE: of its position's row), where G is grad_output widened to fp32,
clamped to [-clip, clip] when clipping, and for MEAN multiplied by fp32 1/L of the bag (L counts
-1 positions). Lookups are keyed hash_size_cumsum[t] + index (the rows of the tables before the
feature's table, plus the row) and sorted stably; a run is one key. A run of SL < threshold
lookups is one segment; a longer run is cut into segments of `chunk` lookups. Each segment is
summed from +0 in sorted order (acc + c, or fma(w, G, acc) when weighted), and a run's segment
partials are added in ascending order starting from the first: in fp32 (deterministic mode),
or, in atomic mode (bwd_combine "atomic"), widened to fp64, added in fp64 and rounded once to
fp32 (ref/SEMANTICS.md 4 amends the spec so; ascending is one order atomic mode allows, and the
reference's). The code vectorises across
segments (step k adds every segment's k-th lookup) and then across runs (step i adds every
run's i-th partial), which keeps each one's order.

Section 5 in fp32, one IEEE operation at a time (fma emulated exactly by tbe_oracle.fma_f32);
the 32-lane sum (step 2) is also the per-sample-weight gradient's order. Write-back: fp32 as
computed; fp16/bf16 to nearest even, or stochastically: a = x toward zero in the format (the
largest finite value past it), q = the format's spacing at a, frac = (|x| - |a|) / q,
u = word 0 of Philox4x32-10 with key (seed_lo, seed_hi) and counter (col, row_lo, row_hi, step)
where row is the row's key, b = |a| + q with a's sign (Inf past the largest finite value), and
b is stored when u < frac * 2^32. NaN and Inf store as round-to-nearest does.

Decisions where the spec is silent (tbecheck's, written in ref/optimizer.h too): the case's
hyper-parameters are fp32 values; the SR row is the row's linear key; -1 lookups and positions
outside every bag have a per-sample-weight gradient of 0.
"""

import numpy as np

import tbe_oracle

LANES = 32
U32 = np.uint64(0xFFFFFFFF)
U32_INT = 0xFFFFFFFF

# (mantissa bits, minimum normal exponent, maximum exponent) of the 16-bit weight formats
FMT16 = {"fp16": (10, -14, 15), "bf16": (7, -126, 127)}


def f32(x):
    return np.float32(x)


def widen(bits, dtype):
    """Values of an fp32/fp16/bf16 array (16-bit types as stored) as float32, exactly."""
    if dtype == "fp32":
        return bits.astype(np.float32)
    if dtype == "fp16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def lane_sum(a, b):
    """Section 5 step 2 for each row of a and b ([n, D] float32): lane l sums fma(a_d, b_d, s_l)
    for d = l, l+32, ... from +0, then s_l + s_(l xor o) for o = 16, 8, 4, 2, 1; returns s_0."""
    n, D = a.shape
    s = np.zeros((n, LANES), dtype=np.float32)
    for d in range(D):
        s[:, d % LANES] = tbe_oracle.fma_f32(a[:, d], b[:, d], s[:, d % LANES])
    lane = np.arange(LANES)
    for o in (16, 8, 4, 2, 1):
        s = s + s[:, lane ^ o]
    return s[:, 0]


# ---------------------------------------------------------------- Philox4x32-10 (Random123)

PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
PHILOX_W = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))


def philox4x32_10(ctr, key):
    """ctr: 4 uint64 arrays of 32-bit words; key: 2 such words. Returns the 4 output words."""
    c = [np.asarray(x, dtype=np.uint64) & U32 for x in ctr]
    k0, k1 = np.uint64(key[0]) & U32, np.uint64(key[1]) & U32
    for r in range(10):
        if r:
            k0, k1 = (k0 + PHILOX_W[0]) & U32, (k1 + PHILOX_W[1]) & U32
        p0, p1 = PHILOX_M[0] * c[0], PHILOX_M[1] * c[2]  # < 2^64: exact in uint64
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & U32, (p0 >> np.uint64(32)) ^ c[3] ^ k1,
             p0 & U32]
    return c


# ---------------------------------------------------------------- write-back


def store(x, wdtype, sr, draw):
    """Stores the float32 array x in the weight dtype: the stored bits (float32 values for fp32).
    draw(): the Philox words u, one per element of x, for stochastic rounding."""
    if wdtype == "fp32":
        return x
    rne = tbe_oracle.store_bits(x.astype(np.float64), wdtype).astype(np.uint16)
    if not sr:
        return rne
    mant, emin, emax = FMT16[wdtype]
    ax = np.abs(x.astype(np.float64))
    finite = np.isfinite(ax)
    axf = np.where(finite, ax, 0.0)
    top = 2.0 ** emax * (2 - 2.0 ** -mant)  # the largest finite value
    _, e = np.frexp(axf)
    q = np.ldexp(1.0, np.maximum(e - 1, emin) - mant)  # the spacing at |x|
    a = np.floor(axf / q) * q
    past = a > top
    q = np.where(past, 2.0 ** (emax - mant), q)
    a = np.where(past, top, a)
    frac = (axf - a) / q  # exact: q is a power of two
    up = draw().astype(np.float64) < frac * 2.0 ** 32
    mag = np.where(up, a + q, a)
    out = tbe_oracle.store_bits(np.copysign(mag, x.astype(np.float64)), wdtype)
    return np.where(finite, out, rne).astype(np.uint16)


# ---------------------------------------------------------------- the backward


class Backward:
    """What the oracle's backward computes: weights (as weights.npy stores them), momentum
    (float32, or None) and per-sample-weight gradients (float32, or None)."""

    def __init__(self, weights, momentum, psw_grad):
        self.weights = weights
        self.momentum = momentum
        self.psw_grad = psw_grad


def effective_gradient(m, grad_output, layout, offsets):
    """G: grad_output widened, clipped, and MEAN-scaled by fp32 1/L per bag."""
    G = widen(grad_output, m["out_dtype"]).copy()
    clip = f32(m["clip"])
    if clip > 0:
        G = np.where(G > clip, clip, np.where(G < -clip, -clip, G))
    if m["pool"] == "mean":
        L = np.diff(offsets.astype(np.int64))
        for t in range(layout.T):
            bags = np.arange(layout.B_offsets[t], layout.B_offsets[t + 1])
            bags = bags[L[bags] > 0]
            at = layout.bag_out[bags][:, None] + np.arange(int(layout.D_feat[t]))
            G[at] = G[at] * (f32(1) / L[bags].astype(np.float32))[:, None]
    return G


def segment_sums(rows, weights, seg_start, seg_len):
    """Sums each segment of consecutive rows ([n, D] float32) from +0 in order: acc + row, or
    fma(w, row, acc) with weights. Returns [segments, D]."""
    acc = np.zeros((len(seg_start), rows.shape[1]), dtype=np.float32)
    for k in range(int(seg_len.max()) if len(seg_len) else 0):
        live = np.nonzero(seg_len > k)[0]
        r = rows[seg_start[live] + k]
        if weights is None:
            acc[live] = acc[live] + r
        else:
            w = np.broadcast_to(weights[seg_start[live] + k][:, None], r.shape)
            acc[live] = tbe_oracle.fma_f32(w, r, acc[live])
    return acc


def optimize(m, g, w, mom):
    """Section 5 on rows g, w ([n, D] float32) and momentum mom ([n] float32): new w, mom."""
    lr = f32(m["lr"])
    if m["opt"] == "sgd":
        return tbe_oracle.fma_f32(np.full_like(g, -lr), g, w), mom
    lam, eps, wd = f32(m["lambda"]), f32(m["eps"]), m["wd"]
    n, D = g.shape
    gd = tbe_oracle.fma_f32(np.full_like(g, lam), w, g) if wd == "l2" else g
    s = lane_sum(gd, gd)
    mom = mom + s / f32(D)
    mu = lr / (np.sqrt(mom) + eps)
    if wd == "l2":
        c = tbe_oracle.fma_f32(-mu, np.full_like(mu, lam), np.ones_like(mu))
    elif wd == "decouple":
        c = np.full_like(mu, tbe_oracle.fma_f32(np.array([-lr]), np.array([lam]),
                                                np.array([f32(1)]))[0])
    else:
        c = np.ones_like(mu)
    c = c[:, None]
    cw = np.where(c == 1, w, c * w)
    return tbe_oracle.fma_f32(np.broadcast_to(-mu[:, None], g.shape).copy(), g, cw), mom


def backward(m, a, layout, offsets, indices):
    """Sections 4-5 on the bounds-checked offsets and indices of the case (load_case's m, a)."""
    o = offsets.astype(np.int64)
    idx = indices.astype(np.int64)
    E, D, toff = a["E"].astype(np.int64), a["D"].astype(np.int64), a["table_offset"]
    ftm = a["feature_table_map"].astype(np.int64)
    rows_cumsum = np.concatenate([[0], np.cumsum(E)]).astype(np.int64)
    wdtype = m["wdtype"]
    W = widen(a["weights"], wdtype)
    psw = a.get("per_sample_weights")
    G = effective_gradient(m, a["grad_output"], layout, o)

    # the lookups: positions inside bags whose index is not -1, with their bag
    first = int(o[0]) if layout.total_B else len(idx)
    pos_bag = np.repeat(np.arange(layout.total_B, dtype=np.int64), np.diff(o))
    pos = np.arange(first, first + len(pos_bag), dtype=np.int64)
    keep = idx[pos] != -1
    pos, bag = pos[keep], pos_bag[keep]
    table = ftm[layout.bag_feature[bag]]
    key = rows_cumsum[table] + idx[pos]

    # per-sample-weight gradients from the weights before the update
    psw_grad = None
    if psw is not None:
        psw_grad = np.zeros(len(idx), dtype=np.float32)
        for j in np.unique(table):
            sel = np.nonzero(table == j)[0]
            Dj = int(D[j])
            cols = np.arange(Dj)
            g = G[layout.bag_out[bag[sel]][:, None] + cols]
            w = W[toff[j] + idx[pos[sel]][:, None] * Dj + cols]
            psw_grad[pos[sel]] = lane_sum(g, w)

    new_w = a["weights"].copy()
    new_bits = new_w.view(np.uint16) if wdtype == "fp16" else new_w
    mom = a["momentum"].copy() if m["opt"] == "rowwise_adagrad" else None
    order = np.argsort(key, kind="stable")
    key, pos, bag, table = key[order], pos[order], bag[order], table[order]
    starts = np.nonzero(np.diff(key, prepend=-1))[0].astype(np.int64)
    sl = np.diff(np.concatenate([starts, [len(key)]]))
    run_table = table[starts]
    threshold, chunk = m["bwd_threshold"], m["bwd_chunk"]
    seed, step = int(m["seed"]), int(m["step"])
    for j in np.unique(run_table):
        runs = np.nonzero(run_table == j)[0]
        Dj = int(D[j])
        cols = np.arange(Dj)
        # the table's lookups: its runs are consecutive, since its keys are
        r_start, r_len = starts[runs], sl[runs]
        ent = np.arange(r_start[0], r_start[-1] + r_len[-1])
        first_ent = r_start - r_start[0]
        goff = (layout.bag_out[bag[ent]] if layout.bag_out is not None else pos[ent] * Dj)
        rows = G[goff[:, None] + cols]
        wts = psw[pos[ent]] if psw is not None else None
        # segments: the whole run when short, else chunks
        n_seg = np.where(r_len < threshold, 1, (r_len + chunk - 1) // chunk)
        seg_run = np.repeat(np.arange(len(runs)), n_seg)
        seg_i = np.arange(len(seg_run)) - np.repeat(np.cumsum(n_seg) - n_seg, n_seg)
        short = r_len[seg_run] < threshold
        seg_start = first_ent[seg_run] + np.where(short, 0, seg_i * chunk)
        seg_len = np.where(short, r_len[seg_run],
                           np.minimum(chunk, r_len[seg_run] - seg_i * chunk))
        part = segment_sums(rows, wts, seg_start, seg_len)
        seg_first = np.cumsum(n_seg) - n_seg
        wide = np.float64 if m["bwd_combine"] == "atomic" else np.float32
        g = part[seg_first].astype(wide)
        for i in range(1, int(n_seg.max())):
            live = np.nonzero(n_seg > i)[0]
            g[live] = g[live] + part[seg_first[live] + i].astype(wide)
        g = g.astype(np.float32)
        rkey = key[r_start]
        row = rkey - rows_cumsum[j]
        at = toff[j] + row[:, None] * Dj + cols
        w_new, m_new = optimize(m, g, W[at], mom[rkey] if mom is not None else None)

        def draw():
            ctr = [np.broadcast_to(cols, at.shape),
                   np.broadcast_to(rkey[:, None] & U32_INT, at.shape),
                   np.broadcast_to(rkey[:, None] >> 32, at.shape), np.full(at.shape, step)]
            return philox4x32_10(ctr, (seed & U32_INT, seed >> 32))[0]

        new_bits[at] = store(w_new, wdtype, m["sr"], draw)
        if mom is not None:
            mom[rkey] = m_new
    return Backward(new_w, mom, psw_grad)


def run_backward(m, a, res):
    """The backward of a case after tbe_oracle.run_case gave res: a Backward, or None when the
    case has no backward or its bounds check stopped the call."""
    if m.get("opt", "none") == "none" or res.status != tbe_oracle.STATUS_OK:
        return None
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # IEEE results wanted
        return backward(m, a, res.layout, res.offsets, res.indices)
