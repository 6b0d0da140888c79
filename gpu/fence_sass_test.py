#!/usr/bin/env python3
"""fence_sass_test.py: the fused long-run path's publication order, read from the machine code
(SASS) nvcc emitted: in every chunk kernel, each countdown atomic must follow a GPU-scope fence,
that fence must follow the chunk's partial, and a partial sent by bulk reduce must be waited for
before the countdown. Not a run of the kernels (gpu_backward, race.c).

Why a static check: a missing __threadfence() between a chunk's partial and its countdown is a
race that no launch on the H200 exposed (fuzz/FAULTS.md, fault fused_no_fence: gpu_backward, the
race fuzzer and the campaign all missed it), because the H200 happens to make the stores visible
in time. The CUDA memory model does not promise that; the fence is what does. So the order is
checked where it is decided, in the SASS, in straight-line order:
  - a countdown is an integer ATOMG (the fp64 atomic combine's ATOMG.E.ADD.F64 are partials;
    bwd.steal's take of the next batch, an atomicInc (ATOMG.E.INC or ATOM.E.INC), is neither:
    no countdown is an increment);
  - walking back from it, a MEMBAR of GPU scope (or wider) must come before any global store or
    fp64 atomic (a partial published after the fence would not be ordered by it);
  - walking back from that fence, a global store or fp64 atomic (the partial) must come before
    the function's start;
  - walking back from it, if a bulk reduce (UBLKRED: bwd.bulk's cp.reduce.async.bulk) comes
    before the function's start, a wait on the bulk group (DEPBAR: cp.async.bulk.wait_group)
    must come between it and the countdown. The planted fault bulk_no_wait drops that wait, and
    no launch on the H200 exposed it either (the reduce lands before the last program reads the
    row); PTX orders the two only through the wait.

usage: fence_sass_test.py CUOBJDUMP BINARY
  exit 0: every chunk kernel orders its countdowns; 1: one does not (it names it and the
  instruction); 77: no cuobjdump here (CI takes NVIDIA's from PyPI, the GPU host's toolkit has
  one), or the binary holds no chunk kernel (built without CUDA).
"""
import re
import shutil
import subprocess
import sys

SKIP = 77
FUNC = re.compile(r"^\s*Function : (\S+)")
INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FENCE = re.compile(r"^MEMBAR\.(SC|ALL)?\.?(GPU|SYS)\b")


def kind(text):
    """'countdown', 'fence', 'partial' or None for one instruction's text (predicate dropped)."""
    op = re.sub(r"^@!?U?P\w+\s+", "", text)
    if FENCE.match(op):
        return "fence"
    if op.startswith("UBLKRED"):
        return "bulk"
    if op.startswith("DEPBAR"):
        return "wait"
    if op.startswith("ATOMG") and ".F64" in op.split()[0]:
        return "partial"
    if op.startswith("ATOM") and ".INC" in op.split()[0]:
        return None
    if op.startswith("ATOMG") or op.startswith("ATOM."):
        return "countdown"
    if op.startswith("STG") or op.startswith("RED"):
        return "partial"
    return None


def check(name, insns):
    """The problems of one function: (address, text, why) per badly ordered countdown."""
    bad = []
    kinds = [kind(t) for _, t in insns]
    for i, k in enumerate(kinds):
        if k != "countdown":
            continue
        j = i - 1
        while j >= 0 and kinds[j] not in ("fence", "partial"):
            j -= 1
        if j < 0 or kinds[j] != "fence":
            why = ("a partial is stored between the fence and the countdown"
                   if j >= 0 and "fence" in kinds[:j]
                   else "no GPU-scope fence between the partial and the countdown")
            bad.append((insns[i][0], insns[i][1], why))
            continue
        if "partial" not in kinds[:j] and "bulk" not in kinds[:j]:
            bad.append((insns[i][0], insns[i][1], "the fence before the countdown follows no "
                        "partial: the countdown comes before the chunk's partial is stored"))
            continue
        b = i - 1
        while b >= 0 and kinds[b] != "bulk":
            b -= 1
        if b >= 0 and "wait" not in kinds[b + 1:i]:
            bad.append((insns[i][0], insns[i][1], "a bulk reduce before the countdown is not "
                        "waited for: the last program may read the row before it lands"))
    return bad


def main():
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    tool, binary = sys.argv[1], sys.argv[2]
    if not shutil.which(tool):
        print(f"SKIP: no cuobjdump ('{tool}') here; the GPU host's toolkit has one")
        return SKIP
    r = subprocess.run([tool, "-sass", binary], capture_output=True, text=True)
    if r.returncode:
        print(f"FAIL: {tool} -sass {binary}: exit {r.returncode}: {r.stderr.strip()[:300]}")
        return 1
    funcs, name = {}, None
    for line in r.stdout.splitlines():
        m = FUNC.match(line)
        if m:
            name = m.group(1)
            funcs.setdefault(name, [])
            continue
        m = INSN.match(line)
        if m and name:
            funcs[name].append((m.group(1), m.group(2)))
    chunk = {n: v for n, v in funcs.items() if "chunk_kernel" in n}
    if not chunk:
        print(f"SKIP: {binary} holds no chunk kernel (built without CUDA?)")
        return SKIP
    fail, countdowns, bulks = 0, 0, 0
    for n, insns in sorted(chunk.items()):
        countdowns += sum(kind(t) == "countdown" for _, t in insns)
        bulks += sum(kind(t) == "bulk" for _, t in insns)
        if not any(kind(t) == "countdown" for _, t in insns):
            print(f"FAIL {n}: no countdown atomic found (the check no longer sees the fused path)")
            fail = 1
        for addr, text, why in check(n, insns):
            print(f"FAIL {n} /*{addr}*/ {text}: {why}")
            fail = 1
    if not bulks:
        print("FAIL: no bulk reduce found (the check no longer sees bwd.bulk's path)")
        fail = 1
    print(f"{'FAIL' if fail else 'pass'}  {len(chunk)} chunk kernels, {countdowns} countdown "
          f"atomics, each after a GPU-scope fence that follows the partial, the {bulks} bulk "
          f"reduces waited for: {'no' if fail else 'yes'}")
    return fail


if __name__ == "__main__":
    sys.exit(main())
