#!/usr/bin/env python3
"""recorded_test.py: ref/'s model of torchrec's Triton TBE held to the outputs an H200 recorded
(recorded/triton/, replayed by ext.recorded), on a machine without a GPU. Not the adapter's test.

Every output held to the triton model must pass (bitwise, or within the model's slack where the
GPU's arithmetic is approximate) or be declined for a reason the model states; every failure
against the normative reference must be one of FINDINGS (a defect the Triton TBE has), and each
finding must still be shown by some case.

usage: recorded_test.py --tbecheck PATH --source DIR --work DIR   (SKIP: exit 77 without NumPy)
"""

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys

# what the model declines to know, by its reason
DECLINED = ("pairs each weight with an entry of its row through an unstable sort",
            "stochastic rounding: the Triton TBE draws its own stream")

# (name, does it explain a failed result (canonical case, output, reason)?); where the output
# matches the model, the reason must name the model's rule (ref_order_defect) too
FINDINGS = [
    ("a pruned row (-1) is read and updated as the previous table's last row",
     lambda c, o, why: "invalid_kind=pruned" in c and o in ("output", "weights") and
     "its defect, a pruned row (-1) read and updated" in why),
    ("weighted rows pair their weights with other entries (an unstable sort)",
     lambda c, o, why: "weighted=1" in c and "psw=" not in c and o in ("weights", "momentum")),
    ("fp32 weights into a 16-bit output are rounded twice (fp64, fp32, fp16)",
     lambda c, o, why: "wdtype=" not in c and "out=fp16" in c and o == "output" and
     "its defect, double rounding: the fp64 sum stored through fp32 into fp16" in why),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tbecheck", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    here = os.path.join(a.source, "harness", "check", "ext")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    db = os.path.join(a.work, "recorded.db")
    env = dict(os.environ, PYTHONPATH=here, TBECHECK_RECORDED_ORDER="triton",
               TBECHECK_RECORDED=os.path.join(here, "recorded", "triton"))
    r = subprocess.run([a.tbecheck, "run", "--engines", "ref,ext.recorded", "--db", db,
                        os.path.join(here, "recorded", "triton.cases")],
                       env=env, capture_output=True, text=True)
    if "engine ext.recorded: skip" in r.stdout + r.stderr:
        print("SKIP: ext.recorded cannot run here (NumPy?):", (r.stdout + r.stderr)[:300])
        return 77
    if r.returncode not in (0, 1):
        print(r.stdout[-3000:], r.stderr[-3000:])
        print(f"FAIL: tbecheck exited {r.returncode}")
        return 1
    con = sqlite3.connect(db)
    rows = con.execute("select c.canonical, r.baseline, r.output, r.status, coalesce(r.reason, '') "
                       "from results r join cases c on c.id = r.case_id "
                       "where r.engine = 'ext.recorded'").fetchall()
    con.close()
    problems, passed, shown = [], {"forward": 0, "backward": 0}, set()
    for canon, baseline, output, status, why in rows:
        if baseline == "model":
            if status == "pass":
                passed["forward" if output == "output" else "backward"] += 1
            elif not (status == "unsupported" and any(d in why for d in DECLINED)):
                problems.append(f"model {output} {status}: {why[:200]} ({canon})")
        elif status in ("fail", "error"):
            names = [n for n, explains in FINDINGS if explains(canon, output, why)]
            if "no rule of the model leaves the bound" in why:
                names = []
            if status == "fail" and names:
                shown.update(names)
            else:
                problems.append(f"{baseline} {output} {status}, no finding explains it: "
                                f"{why[:200]} ({canon})")
    cases = sum(1 for line in open(os.path.join(here, "recorded", "triton.cases"))
                if line.strip() and not line.startswith("#"))
    if passed["forward"] != cases:
        problems.append(f"the model matched {passed['forward']} of {cases} forward outputs")
    if passed["backward"] < 10:
        problems.append(f"only {passed['backward']} backward outputs held to the model passed")
    problems += [f"finding no longer shown: {n}" for n, _ in FINDINGS if n not in shown]
    for p in problems:
        print("FAIL:", p)
    print(f"{len(rows)} results of ext.recorded; model passes: {passed}; findings shown: "
          f"{len(shown)} of {len(FINDINGS)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
