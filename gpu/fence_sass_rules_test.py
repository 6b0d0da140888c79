#!/usr/bin/env python3
"""fence_sass_rules_test.py: fence_sass_test.py's rules on hand-written SASS, so that the checker
itself is shown to fail where it must, on any machine (no cuobjdump, no GPU): the clean fused
orders pass (plain partial, fp64 atomics, bulk reduce with its wait), and each planted fault's
order (no fence, countdown first, a partial after the fence, no bulk wait) is named.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fence_sass_test as sass  # noqa: E402

# (name, instructions in program order, the problem expected: None, or a word of its reason)
CASES = [
    ("plain partial, fence, countdown",
     ["STG.E desc[UR8][R2.64], R4", "MEMBAR.SC.GPU", "ATOMG.E.ADD.STRONG.GPU PT, R2, [R2.64], R0"],
     None),
    ("fp64 atomic partials, fence, countdown",
     ["ATOMG.E.ADD.F64.RN.STRONG.GPU PT, RZ, [R8.64], R6", "MEMBAR.SC.GPU",
      "ATOMG.E.ADD.STRONG.GPU PT, R2, [R2.64], R0"], None),
    ("bulk reduce, its wait, fence, countdown (the clean build's order)",
     ["MEMBAR.ALL.CTA", "FENCE.VIEW.ASYNC.S", "UBLKRED.G.S.ADD.F64.RN [UR6], [UR5], UR4",
      "UTMACMDFLUSH", "DEPBAR.LE SB0, 0x0", "FENCE.VIEW.ASYNC.G", "MEMBAR.SC.GPU",
      "ATOMG.E.ADD.STRONG.GPU PT, R2, [R2.64], R0"], None),
    ("a steal counter's increment is no countdown",
     ["ATOMG.E.INC.STRONG.GPU PT, R2, [R2.64], R0"], None),
    ("fused_no_fence: no fence",
     ["STG.E desc[UR8][R2.64], R4", "ATOMG.E.ADD.STRONG.GPU PT, R2, [R2.64], R0"], "fence"),
    ("countdown_first: the fence follows no partial",
     ["MEMBAR.SC.GPU", "ATOMG.E.ADD.STRONG.GPU PT, R2, [R2.64], R0",
      "STG.E desc[UR8][R2.64], R4"], "partial"),
    ("a partial stored after the fence",
     ["STG.E desc[UR8][R2.64], R4", "MEMBAR.SC.GPU", "STG.E desc[UR8][R6.64], R4",
      "ATOMG.E.ADD.STRONG.GPU PT, R2, [R2.64], R0"], "between"),
    ("bulk_no_wait: the bulk reduce not waited for",
     ["UBLKRED.G.S.ADD.F64.RN [UR6], [UR5], UR4", "UTMACMDFLUSH", "FENCE.VIEW.ASYNC.G",
      "MEMBAR.SC.GPU", "ATOMG.E.ADD.STRONG.GPU PT, R2, [R2.64], R0"], "waited"),
    ("a wait before the bulk reduce is not its wait",
     ["DEPBAR.LE SB0, 0x0", "UBLKRED.G.S.ADD.F64.RN [UR6], [UR5], UR4", "MEMBAR.SC.GPU",
      "ATOMG.E.ADD.STRONG.GPU PT, R2, [R2.64], R0"], "waited"),
]


def main():
    fail = 0
    for name, ops, want in CASES:
        bad = sass.check(name, [(f"{16 * i:04x}", t) for i, t in enumerate(ops)])
        got = bad[0][2] if bad else None
        ok = (want is None and not bad) or (want is not None and got is not None and want in got)
        print(f"{'pass' if ok else 'FAIL'}  {name}: {got or 'ordered'}")
        fail |= not ok
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
