#!/usr/bin/env python3
"""eng_ext.py: the driver behind tbecheck's external engines written in Python (ext.NAME):
imports the module tbecheck_ext_NAME and speaks the protocol of harness/check/engine_ext.h for it.
Not an adapter (harness/check/ext/) and not the oracle's worker (eng_oracle.py).

The module is found on PYTHONPATH, then in harness/check/ext/ (the shipped adapters). It gives
  ORDER      the order model of ref/forward_order.h its deterministic outputs follow: "normative" or
             "fbgemm_cpu"
  version()  optional: what it runs, e.g. "fbgemm_gpu 1.8.0, torch 2.13.0"
  run(case)  case.manifest: manifest.json as a dict; case.arrays: the input .npy files by name
             (weights as stored: fp16 as float16, bf16 as uint16 bits); case.dir. It returns a
             dict of what it computed, any of:
               indices, offsets  arrays after its bounds check (the index dtype's values)
               warnings          the bounds check's counter (an int)
               offender          (feature, bag) or (feature, bag, position, value): its FATAL
                                 check stopped the call
               output            the forward's output, flat: float32, float16, or uint16 bf16
                                 bits, as the case's out dtype says (never converted here: a
                                 conversion would hide a rounding)
               weights           updated weights, flat, in the dtype of weights.npy
               momentum, psw_grad  float32 arrays
               declined          {output name: reason} for outputs it does not give on purpose
                                 (a semantic difference the spec allows: unsupported)
               raised            {output name: reason} for outputs it failed on although the
                                 input was valid (a failure, with the reason)
             and raises NotImplementedError(reason) for a case it cannot run.
An exception at import or in version() makes the engine unavailable, with the reason.

usage: eng_ext.py NAME
"""

import os
import sys

INPUTS = ("weights", "table_offset", "E", "D", "feature_table_map", "indices", "offsets",
          "B_vbe", "per_sample_weights", "grad_output", "momentum")
FLOAT_NPY = {"fp32": "<f4", "fp16": "<f2", "bf16": "<u2"}
INDEX_NPY = {"int32": "<i4", "int64": "<i8"}


class Case:
    """One case directory: its manifest and input arrays."""

    def __init__(self, np, json, d):
        self.dir = d
        with open(os.path.join(d, "manifest.json")) as f:
            self.manifest = json.load(f)
        self.arrays = {}
        for name in INPUTS:
            p = os.path.join(d, name + ".npy")
            if os.path.exists(p):
                self.arrays[name] = np.load(p, allow_pickle=False)


def exact_array(np, name, value, dtype):
    """value as a flat array of dtype, refused when that would change a value or a bit."""
    a = np.ascontiguousarray(np.asarray(value)).reshape(-1)
    want = np.dtype(dtype)
    if a.dtype == want:
        return a
    if a.dtype.kind in "iu" and want.kind in "iu":
        b = a.astype(want)
        if np.array_equal(b.astype(np.int64), a.astype(np.int64)):
            return b
    raise TypeError(f"the engine's {name} is {a.dtype}, expected {want} (tbecheck converts no "
                    "floating value: a conversion would hide a rounding)")


def write(np, case, got):
    """Writes the outputs the module returned as engine_ext.h says."""
    m = case.manifest
    idx, wt = INDEX_NPY[m["itype"]], FLOAT_NPY[m["wdtype"]]
    kinds = {"indices": idx, "offsets": idx, "output": FLOAT_NPY[m["out_dtype"]],
             "weights": wt, "momentum": "<f4", "psw_grad": "<f4"}
    unknown = set(got) - set(kinds) - {"warnings", "offender", "declined", "raised"}
    if unknown:
        raise KeyError(f"the engine returned outputs tbecheck does not know: {sorted(unknown)}")
    for name, dtype in kinds.items():
        if got.get(name) is not None:
            np.save(os.path.join(case.dir, f"ext_{name}.npy"),
                    exact_array(np, name, got[name], dtype))
    if got.get("warnings") is not None:
        np.save(os.path.join(case.dir, "ext_warnings.npy"), np.array([int(got["warnings"])], "<i8"))
    if got.get("offender") is not None:
        who = [int(v) for v in got["offender"]]
        if len(who) not in (2, 4):
            raise ValueError(f"offender {who} is not (feature, bag[, position, value])")
        np.save(os.path.join(case.dir, "ext_offender.npy"), np.array(who, "<i8"))
    for key in ("declined", "raised"):
        missing = got.get(key) or {}
        both = [name for name in missing if got.get(name) is not None]
        if both:
            raise ValueError(f"the engine says {key} of {both} and gives them")
        with open(os.path.join(case.dir, f"ext_{key}.txt"), "w") as f:
            for name, why in missing.items():
                f.write(f"{name}: {' '.join(str(why).split())}\n")


def one_line(e):
    return f"{type(e).__name__}: {e}".replace("\n", " ")


def main():
    if len(sys.argv) != 2:
        print("unavailable: usage: eng_ext.py NAME", flush=True)
        return 2
    name = sys.argv[1]
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ext"))
    try:
        import json
        import importlib
        import numpy as np
        mod = importlib.import_module(f"tbecheck_ext_{name}")
        order = getattr(mod, "ORDER", None)
        if not isinstance(order, str) or not order or " " in order:
            raise AttributeError(f"tbecheck_ext_{name} declares no ORDER")
        version = " ".join(str(mod.version()).split()) if hasattr(mod, "version") else ""
    except Exception as e:  # the engine is skipped with this reason
        print(f"unavailable: {one_line(e)}", flush=True)
        return 0
    print(f"ready order={order}" + (f" version={version}" if version else ""), flush=True)
    for line in sys.stdin:
        try:
            case = Case(np, json, line.rstrip("\n"))
            write(np, case, mod.run(case))
            print("done", flush=True)
        except NotImplementedError as e:
            print(f"unsupported: {' '.join(str(e).split()) or 'not implemented'}", flush=True)
        except Exception as e:  # an engine failure is the case's error, not the worker's end
            print(f"error: {one_line(e)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
