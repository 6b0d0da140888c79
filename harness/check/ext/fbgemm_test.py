#!/usr/bin/env python3
"""fbgemm_test.py: the ext tier: FBGEMM's CPU TBE (ext.fbgemm) over the smoke, edge and fbgemm
cases, every outcome classified. Not the adapter (tbecheck_ext_fbgemm.py) nor the model (ref/).

Every output held to the fbgemm_cpu model must match it bit for bit (the adapter and the model
are right). Every other outcome is a pass; `unsupported` with its reason (a semantic difference
the spec allows, or what FBGEMM cannot express); or a failure that one of FINDINGS explains (a
defect FBGEMM has). An unexplained failure fails the test, and so does a finding that no case
shows any more: the suite must keep finding each defect by itself.

usage: fbgemm_test.py --tbecheck PATH --source DIR --work DIR   (SKIP: exit 77 without FBGEMM)
"""

import argparse
import os
import re
import shutil
import sqlite3
import subprocess
import sys

SKIP = 77


def shared_apart(canon):
    """A table read by features that are not adjacent (map=0,1,0)."""
    m = re.search(r"\bmap=([\d,]+)", canon)
    seen, last = set(), None
    for j in (m.group(1).split(",") if m else []):
        if j in seen and j != last:
            return True
        seen.add(j)
        last = j
    return False


# (name, does it explain a failed result (canonical case, output, baseline, reason)?)
FINDINGS = [
    ("a pruned row (-1) raises, or with bounds=none is read out of bounds",
     lambda c, o, bl, why: "pruned (-1)" in why or
     (re.search(r"invalid_kind=(pruned|mix)", c) and "bounds=none" in c)),
    ("VBE with int32 indices corrupts FBGEMM's heap: the process aborts",
     lambda c, o, bl, why: "killed the process" in why and "vbe=1" in c and "idx=int32" in c),
    ("L2 and DECOUPLE weight decay are dropped on the fp32 fast path",
     lambda c, o, bl, why: bl == "exact" and o in ("weights", "momentum") and
     re.search(r"\bwd=(l2|decouple)", c) and "wdtype=fp16" not in c and "out=fp16" not in c),
    ("a table shared by features that are not adjacent is updated once per group, or fails",
     lambda c, o, bl, why: shared_apart(c)),
    ("fp16 SGD rounds the step to fp16 before the update",
     lambda c, o, bl, why: bl == "exact" and o == "weights" and "wdtype=fp16" in c and
     "opt=sgd" in c),
    ("clipping clamps an fp16 gradient to fp16(clip), not clip",
     lambda c, o, bl, why: bl == "exact" and o in ("weights", "momentum") and "clip=" in c and
     "out=fp16" in c),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tbecheck", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    python = os.environ.get("TBECHECK_PYTHON") or sys.executable
    if subprocess.run([python, "-c", "import fbgemm_gpu"], capture_output=True).returncode:
        print(f"SKIP: {python} cannot import fbgemm_gpu (the ext tier installs fbgemm-gpu-cpu)")
        return SKIP
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    db = os.path.join(a.work, "fbgemm.db")
    cases = [os.path.join(a.source, "cases", f) for f in ("smoke.cases", "edge.cases",
                                                          "fbgemm.cases")]
    r = subprocess.run([a.tbecheck, "run", "--db", db, "--engines", "ref,ext.fbgemm", *cases],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1):
        print(f"FAIL: tbecheck run exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr}")
        return 1
    con = sqlite3.connect(db)
    versions = con.execute("SELECT engine_versions FROM runs").fetchone()[0] or ""
    print(f"runs.engine_versions: {versions}")
    rows = con.execute("SELECT c.canonical, r.output, r.baseline, r.status, r.reason FROM results "
                       "r JOIN cases c ON c.id = r.case_id WHERE r.engine = 'ext.fbgemm'").fetchall()
    con.close()
    problems, seen, counts = [], {name: 0 for name, _ in FINDINGS}, {}
    if "ext.fbgemm: order fbgemm_cpu, fbgemm_gpu " not in versions:
        problems.append(f"the run does not record which FBGEMM ran: {versions!r}")
    for canon, output, baseline, status, why in rows:
        why = why or ""
        counts[(baseline, status)] = counts.get((baseline, status), 0) + 1
        if status == "pass":
            continue
        if status == "unsupported" and why:
            continue
        if status == "skip":
            problems.append(f"ext.fbgemm did not run: {why}")
            break
        if baseline == "model":
            problems.append(f"the model and FBGEMM differ: {canon}: {output}: {why}")
            continue
        explained = [name for name, match in FINDINGS if match(canon, output, baseline, why)]
        if "no rule of the model leaves the bound" in why:
            problems.append(f"matches the model, but no model rule explains it: {canon}: {output}")
        if not explained:
            problems.append(f"unexplained {status}: {canon}: {output} ({baseline}): {why}")
        for name in explained:
            seen[name] += 1
    for name, n in seen.items():
        print(f"{n:4d}  {name}")
        if not n:
            problems.append(f"no case shows the finding '{name}' any more")
    model_passes = counts.get(("model", "pass"), 0)
    print(f"{model_passes} outputs bit for bit with the fbgemm_cpu model, "
          f"{counts.get(('ref', 'pass'), 0)} with the reference")
    if model_passes == 0:
        problems.append("no output was held to the model")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
