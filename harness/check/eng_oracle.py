#!/usr/bin/env python3
"""eng_oracle.py: the worker behind tbecheck's `oracle` engine: runs the NumPy oracle on case
directories that tbecheck exports and writes what it computed back as .npy files.
Not the oracle (ref/oracle/tbe_oracle.py) and not its cross-check driver (ref/oracle/check.py).

Protocol (harness/check/worker.h): the first line is "ready", or "unavailable: REASON" (no NumPy,
no oracle) after which the worker exits. Then, for each line on stdin naming a directory written
by export_batch (harness/store/export.h), it writes into that directory
  oracle_offsets.npy, oracle_indices.npy   after the bounds check, in the index dtype
  oracle_output.npy                        the output's bits as '<f4', '<f2' or '<u2' (bf16), when
                                           the bounds check did not stop the call
  oracle_status.npy                        '<i8' [stopped, index_offender, feature, bag, position,
                                           value, warnings]
and, when the case has a backward that the bounds check let through (tbe_oracle_backward.py),
  oracle_weights.npy                       the updated weights, as weights.npy stores them
  oracle_momentum.npy, oracle_psw_grad.npy '<f4' (row-wise Adagrad; weighted batches)
and answers "done", or "error: MESSAGE" when the oracle raised.

usage: eng_oracle.py ORACLE_DIR
"""

import os
import sys

OUTPUT_VIEW = {"fp32": "<f4", "fp16": "<f2", "bf16": "<u2"}


def run(tbe_oracle, tbe_oracle_backward, np, d):
    m, a = tbe_oracle.load_case(d)
    res = tbe_oracle.run_case(m, a)
    bwd = tbe_oracle_backward.run_backward(m, a, res)
    if bwd is not None:
        np.save(os.path.join(d, "oracle_weights.npy"), bwd.weights)
        for name, v in (("momentum", bwd.momentum), ("psw_grad", bwd.psw_grad)):
            if v is not None:
                np.save(os.path.join(d, f"oracle_{name}.npy"), v.astype("<f4"))
    np.save(os.path.join(d, "oracle_offsets.npy"), res.offsets)
    np.save(os.path.join(d, "oracle_indices.npy"), res.indices)
    o = res.offender
    status = [0, 0, -1, -1, -1, -1, res.warnings]
    if o is not None:
        status = [1, int(o["kind"] == "index"), o["feature"], o["bag"], o["position"],
                  o["value"], res.warnings]
    else:
        bits = np.ascontiguousarray(res.output_bits)
        np.save(os.path.join(d, "oracle_output.npy"), bits.view(OUTPUT_VIEW[m["out_dtype"]]))
    np.save(os.path.join(d, "oracle_status.npy"), np.array(status, dtype="<i8"))


def main():
    if len(sys.argv) != 2:
        print("unavailable: usage: eng_oracle.py ORACLE_DIR", flush=True)
        return 2
    try:
        import numpy as np
        sys.path.insert(0, sys.argv[1])
        import tbe_oracle
        import tbe_oracle_backward
    except Exception as e:  # no NumPy, or no oracle: the engine is skipped with this reason
        print(f"unavailable: {type(e).__name__}: {e}", flush=True)
        return 0
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            run(tbe_oracle, tbe_oracle_backward, np, line.rstrip("\n"))
            print("done", flush=True)
        except Exception as e:  # an oracle failure is the case's error, not the worker's end
            msg = f"{type(e).__name__}: {e}".replace("\n", " ")
            print(f"error: {msg}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
