#!/usr/bin/env python3
"""check.py: the oracle cross-check: exports cases with `tbecheck export`, runs the NumPy oracle
on each, and requires bit-identical results from the C reference. Not the oracle (tbe_oracle.py).

For each case it compares the status, FATAL's offender (feature and bag for an offset offender;
feature, bag, position and value for an index offender), the warning counter, the repaired
offsets and indices, and the output's bits (NaN equals NaN); for a case with a backward (opt
set), the updated weights, the momentum and the per-sample-weight gradients, bit for bit
(tbe_oracle_backward.py). It prints one line per mismatching
case and a summary "oracle: N cases compared, M mismatches". Exit 0 when all match, 1 on a
mismatch or a failed export, 77 (skip) when NumPy is missing.

usage: check.py --tbecheck PATH [--cases FILE ...] [--random N --seed S] --workdir DIR
"""

import argparse
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
except ImportError as e:
    np, NUMPY_MISSING = None, e
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tbe_oracle
    import tbe_oracle_backward

SKIP = 77

# exponent mask and mantissa mask of each output dtype's bits, to recognise NaN
NAN_MASKS = {"fp32": (0x7F800000, 0x007FFFFF), "fp16": (0x7C00, 0x03FF), "bf16": (0x7F80, 0x007F)}


def export(tbecheck, source, dest):
    """Runs `tbecheck export source dest` into a fresh dest; returns the case directories."""
    shutil.rmtree(dest, ignore_errors=True)
    r = subprocess.run([tbecheck, "export", source, dest], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tbecheck export {source} failed ({r.returncode}): {r.stderr.strip()}")
    if not os.path.isdir(dest):  # a .cases file without cases
        return []
    return [os.path.join(dest, d) for d in sorted(os.listdir(dest))
            if os.path.isfile(os.path.join(dest, d, "manifest.json"))]


def random_cases(tbecheck, n, seed, path):
    """Writes the texts of `tbecheck random n seed` to a .cases file at path."""
    r = subprocess.run([tbecheck, "random", str(n), str(seed)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tbecheck random failed ({r.returncode}): {r.stderr.strip()}")
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    if len(lines) != n:
        raise RuntimeError(f"tbecheck random {n} {seed} printed {len(lines)} cases")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def first_difference(name, ref, got):
    """A description of how two integer arrays differ, or None when equal (dtype included)."""
    if ref.dtype != got.dtype:
        return f"{name}: dtype {ref.dtype} vs oracle {got.dtype}"
    if ref.shape != got.shape:
        return f"{name}: {ref.shape[0]} elements vs oracle {got.shape[0]}"
    diff = (ref != got).nonzero()[0]
    if not len(diff):
        return None
    i = int(diff[0])
    return (f"{name}: {len(diff)} differ, first at [{i}]: ref {int(ref[i])} "
            f"oracle {int(got[i])}")


def output_coordinates(layout, i):
    """Where output element i lives: (p, d) for pooling NONE, else the bag, feature and d."""
    if layout.bag_out is None:
        D = int(layout.D_feat[0])
        return f"position {i // D}, d {i % D}"
    D_bag = layout.D_feat[layout.bag_feature]
    bag = int(np.nonzero((layout.bag_out <= i) & (i < layout.bag_out + D_bag))[0][0])
    t = int(layout.bag_feature[bag])
    return (f"feature {t}, bag {bag} (sample {bag - int(layout.B_offsets[t])} of the feature), "
            f"d {i - int(layout.bag_out[bag])}")


def compare_output(m, ref_npy, got, layout):
    """A description of the first output element whose bits differ, or None."""
    fmt = m["out_dtype"]
    ref = ref_npy.view(np.uint32 if fmt == "fp32" else np.uint16)
    if ref.shape != got.shape:
        return f"output: {ref.shape[0]} elements vs oracle {got.shape[0]}"
    exp_mask, man_mask = NAN_MASKS[fmt]

    def isnan(b):
        return ((b & exp_mask) == exp_mask) & ((b & man_mask) != 0)

    bad = (ref != got) & ~(isnan(ref) & isnan(got))
    diff = bad.nonzero()[0]
    if not len(diff):
        return None
    i = int(diff[0])
    width = 8 if fmt == "fp32" else 4
    return (f"output: {len(diff)} of {len(ref)} elements differ, first [{i}] "
            f"({output_coordinates(layout, i)}): ref 0x{int(ref[i]):0{width}x} "
            f"oracle 0x{int(got[i]):0{width}x}")


def compare_bits(name, ref, got, fmt):
    """A description of how two float arrays' bits differ (NaN equals NaN), or None."""
    view = np.uint32 if fmt == "fp32" else np.uint16
    ref, got = ref.view(view), np.ascontiguousarray(got).view(view)
    if ref.shape != got.shape:
        return f"{name}: {ref.shape[0]} elements vs oracle {got.shape[0]}"
    exp_mask, man_mask = NAN_MASKS[fmt]

    def isnan(b):
        return ((b & exp_mask) == exp_mask) & ((b & man_mask) != 0)

    diff = ((ref != got) & ~(isnan(ref) & isnan(got))).nonzero()[0]
    if not len(diff):
        return None
    i = int(diff[0])
    width = 8 if fmt == "fp32" else 4
    return (f"{name}: {len(diff)} of {len(ref)} differ, first [{i}]: ref 0x{int(ref[i]):0{width}x}"
            f" oracle 0x{int(got[i]):0{width}x}")


def compare_backward(m, a, res):
    """The differences between the reference's backward outputs and the oracle's."""
    if m.get("opt", "none") == "none":
        return []
    try:
        bwd = tbe_oracle_backward.run_backward(m, a, res)
    except Exception as e:  # a crash of the oracle on a case is a finding, not a stop
        return [f"oracle backward raised {type(e).__name__}: {e}"]
    if bwd is None:
        return [] if m["ref_backward"] == "not run" else [
            f"backward: ref '{m['ref_backward']}', the oracle did not run it"]
    if m["ref_backward"] != "ok":
        return [f"backward: ref '{m['ref_backward']}': {m.get('ref_backward_message')}"]
    outs = [("weights", bwd.weights, m["wdtype"]), ("momentum", bwd.momentum, "fp32"),
            ("psw_grad", bwd.psw_grad, "fp32")]
    diffs = []
    for name, got, fmt in outs:
        if got is None:
            continue
        if "ref_" + name not in a:
            diffs.append(f"{name}: ref_{name}.npy missing")
            continue
        d = compare_bits(name, a["ref_" + name], got, fmt)
        if d:
            diffs.append(d)
    return diffs


def compare_case(path):
    """Runs the oracle on one exported case; returns (case text, list of differences)."""
    m, a = tbe_oracle.load_case(path)
    try:
        res = tbe_oracle.run_case(m, a)
    except Exception as e:  # a crash of the oracle on a case is a finding, not a stop
        return m["case"], [f"oracle raised {type(e).__name__}: {e}"]
    diffs = []
    if m["ref_status"] != res.status:
        diffs.append(f"status: ref '{m['ref_status']}' oracle '{res.status}'"
                     + (f" ({res.offender})" if res.offender else "")
                     + (f" ref message: {m.get('ref_message')}" if m.get("ref_message") else ""))
    elif res.offender is not None:
        o = res.offender
        fields = ("feature", "bag") if o["kind"] == "offset" else (
            "feature", "bag", "position", "value")
        for f in fields:
            if m.get("ref_" + f) != o[f]:
                diffs.append(f"{o['kind']} offender {f}: ref {m.get('ref_' + f)} oracle {o[f]}")
    if m["ref_warnings"] != res.warnings:
        diffs.append(f"warnings: ref {m['ref_warnings']} oracle {res.warnings}")
    for name, got in (("offsets", res.offsets), ("indices", res.indices)):
        d = first_difference(name, a["ref_" + name], got)
        if d:
            diffs.append(d)
    if m["ref_status"] == res.status == tbe_oracle.STATUS_OK:
        if "ref_output" not in a:
            diffs.append("output: ref_output.npy missing")
        else:
            d = compare_output(m, a["ref_output"], res.output_bits, res.layout)
            if d:
                diffs.append(d)
    diffs += compare_backward(m, a, res)
    return m["case"], diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tbecheck", required=True, help="path of the tbecheck executable")
    ap.add_argument("--cases", nargs="*", default=[], help=".cases files to export and check")
    ap.add_argument("--random", type=int, default=0, help="number of random cases")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random cases")
    ap.add_argument("--workdir", required=True, help="where exported cases are written")
    args = ap.parse_args()

    if np is None:
        print(f"SKIP: the oracle needs NumPy: {NUMPY_MISSING}")
        return SKIP

    os.makedirs(args.workdir, exist_ok=True)
    dirs = []
    try:
        for i, f in enumerate(args.cases):
            name = os.path.splitext(os.path.basename(f))[0]
            dirs += export(args.tbecheck, f, os.path.join(args.workdir, f"{i}_{name}"))
        if args.random:
            rc = os.path.join(args.workdir, "random.cases")
            random_cases(args.tbecheck, args.random, args.seed, rc)
            dirs += export(args.tbecheck, rc, os.path.join(args.workdir, "random"))
    except (RuntimeError, OSError) as e:
        print(f"oracle: {e}")
        return 1

    mismatches = 0
    for d in dirs:
        case, diffs = compare_case(d)
        if diffs:
            mismatches += 1
            print(f"MISMATCH {case}  [{d}]: " + "; ".join(diffs))
    print(f"oracle: {len(dirs)} cases compared, {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
