#!/usr/bin/env python3
"""faults.py: builds tbecheck with one planted fault (-DTBE_FAULT=NAME) in a tree of its own and
requires the suite to catch it: the fault's named tests, the named cases and a bounded `tbecheck
fuzz` campaign, each recorded with what caught it, after how many cases and seconds.
Not the fuzz campaign (harness/cli/fuzz_campaign.c) nor the libFuzzer targets (fuzz/fuzz_*.c).

usage: faults.py run NAME --source DIR --build DIR --tbecheck PATH [--jobs N] [--seconds S]
                      [--detectors D,...]
           builds BUILD/faults/NAME (BUILD: the clean tree, TBECHECK: its tbecheck), runs
           the detectors (--detectors: only these of the fault's tests, cases and fuzz),
           writes BUILD/faults/NAME/result.json;
           exit 0 caught as expected, 1 not, 2 bad usage, 77 skip (a GPU fault without a GPU)
       faults.py build NAME --source DIR --build DIR [--jobs N]
           configures and builds BUILD/faults/NAME only (needs BUILD configured, not built:
           the GPU host builds the trees beside the clean build; `run` then rebuilds nothing)
       faults.py table BUILD           the FAULTS.md rows of the results under BUILD/faults
       faults.py names CPU_LIST GPU_LIST   exit 1 unless these lists (CMake's) match FAULTS

A detection counts only where the fault is the cause: the first failing case of the named cases
and the campaign's shrunk reproducer must pass on the clean build (--tbecheck), and every named
test passes in the quick tier. Each detector in a fault's `expect` must catch it, and at least
one detector must.
"""
import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

SKIP = 77
GRACE = 30         # seconds a campaign may run past its budget (the case in flight, the shrink)
CLEAN_LIMIT = 120  # seconds a failing case may take on the clean build
ENV = dict(os.environ, OMP_WAIT_POLICY="passive")
# the named cases, those aimed at the faults first
CPU_CASES = ["cases/faults.cases", "cases/smoke.cases", "cases/edge.cases"]
GPU_CASES = ["cases/faults.cases", "cases/smoke.cases", "cases/gpu.cases",
             "cases/gpu_backward.cases"]

# name: what it breaks, where (the hook), the named tests meant to catch it, and `expect`: the
# detectors ("cases", "fuzz" or a test) that must each catch it (fuzz/FAULTS.md shows them).
# GPU faults' hooks are in gpu/; their expect lists are what the GPU host measured (FAULTS.md).
FAULTS = {
    "repair_not_monotone": dict(
        breaks="WARNING/IGNORE offset repair clamps each offset to [0, N] without the running "
               "max (ref/bounds.c): decreasing offsets stay decreasing",
        tests=["bounds_test", "fuzz_replay_bounds"],
        expect=["bounds_test", "fuzz_replay_bounds", "cases", "fuzz"]),
    "pruned_as_row0": dict(
        breaks="a -1 (pruned) index in a pooled FP32-weight bag reads row 0 instead of being "
               "skipped (ref/forward.c)",
        tests=["forward_test"],
        expect=["forward_test", "cases", "fuzz"]),
    "vbe_rank1_shift": dict(
        breaks="VBE: every bag of rank 1 writes its output one row early (ref/tbe.c, the layout "
               "shared by the reference and its exact twin)",
        tests=["tbe_test"],
        expect=["tbe_test", "cases", "fuzz"]),
    "fp16_truncate": dict(
        breaks="fp16 narrowing truncates instead of rounding to nearest even (ref/half.c): the "
               "forward's fp16 stores, the optimizer's scalar stores",
        tests=["half_test"],
        expect=["half_test", "cases", "fuzz"]),
    "eps_in_sqrt": dict(
        breaks="row-wise Adagrad divides by sqrt(m + eps) instead of sqrt(m) + eps "
               "(ref/optimizer.c)",
        tests=["optimizer_test"],
        expect=["optimizer_test", "cases", "fuzz"]),
    "momentum_d_twice": dict(
        breaks="row-wise Adagrad adds sum(g^2) / D / D to the momentum, not sum(g^2) / D "
               "(ref/optimizer.c)",
        tests=["optimizer_test"],
        expect=["optimizer_test", "cases", "fuzz"]),
    "chunk_off_by_one": dict(
        breaks="a long run's chunks after the first start one entry late, so entry s + chunk "
               "of the run is never summed (ref/backward_long.c)",
        tests=["backward_test"],
        expect=["backward_test", "cases", "fuzz"]),
    "fatal_highest": dict(
        breaks="FATAL names the invalid index at the highest position instead of the lowest "
               "(ref/bounds.c)",
        tests=["bounds_test", "fuzz_replay_bounds"],
        expect=["bounds_test", "fuzz_replay_bounds", "cases", "fuzz"]),
    "cmp_skip_last": dict(
        breaks="every comparison (bitwise, integer, bound) stops one element short "
               "(harness/check/compare.c): a wrong last element passes",
        tests=["compare_test", "cli_fault_nowhere"],
        expect=["compare_test", "cli_fault_nowhere"]),
    "fused_no_fence": dict(
        gpu=True, breaks="the fused long-run path without the fence between a chunk's partial "
                         "and the countdown (gpu/backward_long.cu)",
        tests=["gpu_fence_sass", "gpu_backward", "cli_race"], expect=["gpu_fence_sass"]),
    "countdown_first": dict(
        gpu=True, breaks="the countdown is decremented before the chunk's partial is written "
                         "(gpu/backward_long.cu)",
        tests=["gpu_fence_sass", "gpu_backward", "cli_race"],
        expect=["gpu_fence_sass", "gpu_backward", "cli_race", "cases"]),
    "drop_last_chunk": dict(
        gpu=True, breaks="the last chunk's partial is left out of the row's sum "
                         "(gpu/backward_long.cu)",
        tests=["gpu_backward"], expect=["gpu_backward", "cases", "fuzz"]),
    "threshold_gt": dict(
        gpu=True, breaks="a run as long as the short tier's limit goes short (bwd_is_short, "
                         "gpu/backward_impl.cuh): the limit is the threshold, or one past the "
                         "runs of one chunk of at most 256 entries, which the tier also takes",
        tests=["gpu_backward", "cli_gpu"], expect=["gpu_backward", "cli_gpu", "cases", "fuzz"]),
    "sr_swap": dict(
        gpu=True, breaks="the stochastic rounding counter takes (row, column) swapped "
                         "(gpu/optimizer.cuh)",
        tests=["gpu_backward", "cli_gpu"], expect=["cli_gpu", "cases", "fuzz"]),
    # reached only with bwd.steal=on: gpu_backward's steal launches and gpu_backward.cases's
    # steal cases (cli_gpu and the named cases) turn it on; the campaign gives it to half the
    # cases it draws a schedule for, few in 30 s, so fuzz is not required (not measured yet)
    "steal_skip": dict(
        gpu=True, breaks="bwd.steal's counter never hands out its first batch, so the first "
                         "runs or chunk programs of every stealing launch are never done "
                         "(gpu/backward_impl.cuh)",
        tests=["gpu_backward", "cli_gpu"], expect=["gpu_backward", "cli_gpu", "cases"]),
    # reached only with the bulk reduce (bwd.bulk=auto or on, atomic combine) and the fused
    # countdown: gpu_backward.cases's fused bulk cases and faults.cases's two. No run on the H200
    # exposes it (FAULTS.md: every such case passed on the fault's build, the hot row of 3125
    # chunk programs too): the reduce lands before the last program reads the row. The SASS
    # check sees the missing wait in every fused bulk chunk kernel, as it sees fused_no_fence's
    # missing fence
    "bulk_no_wait": dict(
        gpu=True, breaks="a fused chunk program counts its run down without waiting for its bulk "
                         "reduce, so the last one may apply a row some partials have not reached "
                         "(gpu/backward_long.cu)",
        tests=["gpu_fence_sass", "cli_gpu"], expect=["gpu_fence_sass"]),
    # reached only by a session that uploads a second batch under bwd.hoist=on: gpu_backward's
    # hoist test (a second batch after the first's hoisted forward, and the refused backwards);
    # every case run is one batch (gpu_run), on which kept metadata is still its own, so the
    # named cases and the campaign cannot see it and are not expected to
    "hoist_stale": dict(
        gpu=True, breaks="bwd.hoist: the metadata the first hoisted forward made is kept for "
                         "every later batch and the backward skips the generation check, so a "
                         "backward after a new upload runs on the previous batch's runs "
                         "(gpu/engine.cu)",
        tests=["gpu_backward"], expect=["gpu_backward"]),
    # bwd.small_tc's order: the lo parts' MMAs go into the hi chain, the order the model's unit
    # tests pin as different; held by the model's bits in gpu_backward's small_tc test (caught
    # there on the H200: 5 of its 8 tests) and in the bwd.small_tc=on cases (path
    # backward.small; not yet run on the fault)
    "small_tc_one_chain": dict(
        gpu=True, breaks="bwd.small_tc: the lo parts' MMAs accumulate into the hi chain, one "
                         "chain in place of two (gpu/backward_small.cu)",
        tests=["gpu_backward", "cli_gpu"], expect=["gpu_backward", "cli_gpu", "cases"]),
}


def log(*a):
    print(*a, flush=True)


def target_of(test):
    """The build target a named test runs (the cli tests run tbecheck itself)."""
    if test.startswith("fuzz_replay_"):
        return "fuzz_" + test[len("fuzz_replay_"):]
    if test.startswith("cli_") or test.startswith("oracle_"):
        return "tbecheck"
    if test.startswith("gpu_forward_"):
        return "gpu_forward_test"
    if test == "gpu_fence_sass":
        return "tbe_gpu"
    return {"gpu_backward": "gpu_backward_test"}.get(test, test)


def cache_value(build, key):
    """A variable of a CMake cache, or None."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(rf"{re.escape(key)}:\w+=(.*)", line.rstrip("\n"))
                if m:
                    return m.group(1)
    except OSError:
        pass
    return None


def quiet(cmd):
    """Runs cmd, showing its output only when it fails (then exits 3)."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        print(r.stdout, f"faults.py: {' '.join(cmd)}: exit {r.returncode}", file=sys.stderr)
        sys.exit(3)


def build(name, spec, a, tree):
    """Configures and builds the fault's tree; returns the seconds it took."""
    t0 = time.monotonic()
    args = ["cmake", "-S", a.source, "-B", tree, "-DCMAKE_BUILD_TYPE=Release",
            f"-DTBE_FAULT={name}", f"-DTBE_CUDA={'ON' if spec.get('gpu') else 'OFF'}"]
    # the clean build's choices, SQLite's too (a host may have it outside the default paths)
    for key in ("CMAKE_C_COMPILER", "TBE_WERROR", "CMAKE_CUDA_ARCHITECTURES",
                "TBE_REQUIRE_ORACLE", "SQLite3_INCLUDE_DIR", "SQLite3_LIBRARY"):
        v = cache_value(a.build, key)
        if v:
            args.append(f"-D{key}={v}")
    quiet(args)
    targets = sorted({"tbecheck", *(target_of(t) for t in spec["tests"])})
    quiet(["cmake", "--build", tree, "-j", str(a.jobs), "--target", *targets])
    return time.monotonic() - t0


def run_test(tree, test):
    """Runs one named test of the fault's tree as CTest would: (status 'fail'|'pass'|'skip',
    seconds to the first failure line or the end, that line). A test stops at its first failure
    line (a broken CHECK floods the output)."""
    show = subprocess.run(["ctest", "--test-dir", tree, "--show-only=json-v1", "-R", f"^{test}$"],
                          capture_output=True, text=True, check=True)
    tests = json.loads(show.stdout)["tests"]
    if len(tests) != 1:
        raise SystemExit(f"faults.py: the fault's tree has no test named {test}")
    props = {p["name"]: p["value"] for p in tests[0].get("properties", [])}
    seen = {}

    def on_line(line, secs):
        if re.search(r"CHECK\(.*failed|invariant broken|^FAIL", line):
            seen.update(why=line.strip()[:300], seconds=secs)
            return True
        seen["last"] = line.strip()[:300]
        return False

    t0 = time.monotonic()
    rc = stream(tests[0]["command"], on_line, cwd=props.get("WORKING_DIRECTORY"))
    if "why" in seen:
        return "fail", seen["seconds"], seen["why"]
    secs = time.monotonic() - t0
    if rc == props.get("SKIP_RETURN_CODE"):
        return "skip", secs, seen.get("last", "")
    return ("fail" if rc else "pass"), secs, seen.get("last", "")


def stream(cmd, on_line, cwd=None, limit=None):
    """Runs cmd, calling on_line(line, seconds) per output line until it returns True or limit
    seconds have passed (then the process is killed) or the output ends. Returns the exit code
    (None when killed)."""
    t0 = time.monotonic()
    # its own process group, so that a kill reaches its children too (the oracle's worker)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=ENV, cwd=cwd, errors="replace", start_new_session=True)

    def kill():
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(limit, kill) if limit else None
    if timer:
        timer.start()
    stopped = False
    for line in p.stdout:
        if on_line(line.rstrip("\n"), time.monotonic() - t0):
            stopped = True
            kill()
            break
    rc = p.wait()
    if timer:
        stopped = stopped or not timer.is_alive()
        timer.cancel()
    return None if stopped else rc


def passes_clean(a, engines, case):
    """Does the case pass on the clean build (within CLEAN_LIMIT seconds)? A failure there is
    not the fault's doing."""
    try:
        r = subprocess.run([a.tbecheck, "replay", case, "--engines", engines], env=ENV,
                           capture_output=True, text=True, timeout=CLEAN_LIMIT)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0


def run_cases(a, work, engines, files, first_only=False):
    """The named cases through the fault's tbecheck: the first failing case, its comparison,
    how many cases ran up to it and when, and how many failed in all (first_only: the run stops
    at the first failure, as GPU faults' do: their cases take minutes each on a shared GPU)."""
    db = os.path.join(work, "cases.db")
    if os.path.exists(db):
        os.remove(db)
    seen = {"cases": 0, "failed": 0, "first": None}

    def on_line(line, secs):
        m = re.match(r"(pass|FAIL)  case +\d+ +(.*)", line)
        if m:
            seen["cases"] += 1
            if m.group(1) == "FAIL":
                seen["failed"] += 1
                if not seen["first"]:
                    seen["first"] = dict(case=m.group(2), cases=seen["cases"], seconds=secs)
        elif seen["first"] and "why" not in seen["first"] and line.startswith("      "):
            seen["first"]["why"] = line.strip()
            return first_only
        return False

    t0 = time.monotonic()
    rc = stream([a.faulty, "run", "--db", db, "--engines",
                 engines, *[os.path.join(a.source, f) for f in files]], on_line)
    r = dict(detector="cases", what=" ".join(files), seconds_total=time.monotonic() - t0,
             cases_total=seen["cases"], failed=seen["failed"], rc=rc, stopped=rc is None)
    if (rc == 1 or rc is None) and seen["first"] and "why" in seen["first"]:
        r.update(seen["first"], detected=passes_clean(a, engines, seen["first"]["case"]))
    else:
        r["detected"] = False
    return r


def run_fuzz(a, work, engines):
    """A bounded campaign (seed 1) up to its first failure that passes on the clean build: its
    comparison and shrunk reproducer, after how many cases (the failing case's id in a fresh
    database) and seconds. A failure the clean build shares is no detection: it is kept in
    `shared` (a bug the fault did not plant) and the campaign goes on. The campaign checks its
    time between cases and a case can take minutes (SL 10^6): it is killed GRACE seconds after
    its budget, its failure shrunk or not."""
    db = os.path.join(work, "fuzz.db")
    if os.path.exists(db):
        os.remove(db)
    seen, cur, shared = {}, {}, []

    def on_line(line, secs):
        m = re.match(r"FAIL +case +(\d+) +(.*)", line)
        if m:
            cur.clear()
            cur.update(cases=int(m.group(1)), case=m.group(2), seconds=secs)
        elif cur and "why" not in cur:
            cur["why"] = line.strip()
        m = re.match(r" +reproduce: tbecheck replay '(.*)'", line)
        if m and cur:
            cur.update(shrunk=m.group(1), shrunk_seconds=secs - cur["seconds"])
            if not passes_clean(a, engines, cur["shrunk"]):
                shared.append(dict(cur))
                cur.clear()
                return False
            seen.update(cur)
            return True  # one caught failure is enough: stop the campaign
        return False

    t0 = time.monotonic()
    stream([a.faulty, "fuzz", "--seconds", str(a.seconds),
            "--seed", "1", "--engines", engines, "--db", db], on_line, limit=a.seconds + GRACE)
    if not seen and cur.get("why") and passes_clean(a, engines, cur["case"]):
        seen.update(cur)  # killed while shrinking: the unshrunk case is the detection
    r = dict(detector="fuzz", what=f"tbecheck fuzz --seed 1 --seconds {a.seconds}",
             seconds_total=time.monotonic() - t0, detected=bool(seen), shared=shared, **seen)
    for f in shared:
        log(f"  NOTE: the campaign found a failure the clean build shares (not the fault's): "
            f"tbecheck replay '{f['shrunk']}': {f['why']}")
    return r


def gpu_here(a):
    """Why GPU faults cannot run here, or None: a tree without CUDA, or no GPU (the clean
    build's device_test skips). Exits 3 when that test fails: the GPU does not work."""
    if cache_value(a.build, "CMAKE_CUDA_COMPILER") in (None, "", "CMAKE_CUDA_COMPILER-NOTFOUND"):
        return "this build has no CUDA compiler"
    r = subprocess.run(["ctest", "--test-dir", a.build, "-R", "^device_test$"], env=ENV,
                       capture_output=True, text=True)
    if "Skipped" in r.stdout:
        return "there is no GPU here (device_test skips)"
    if r.returncode:
        print(f"faults.py: device_test fails on the clean build:\n{r.stdout}", file=sys.stderr)
        sys.exit(3)
    return None


def fault_spec(name):
    """FAULTS' entry of the fault, or None after saying there is none."""
    spec = FAULTS.get(name)
    if not spec:
        print(f"faults.py: no planted fault named '{name}' (faults: {', '.join(FAULTS)})",
              file=sys.stderr)
    return spec


def run(a):
    spec = fault_spec(a.name)
    if not spec:
        return 2
    only = set(a.detectors.split(",")) if a.detectors else None
    known = {*spec["tests"], "cases", "fuzz"}
    if only and not only <= known:
        print(f"faults.py: {a.name} has no detector {', '.join(sorted(only - known))} "
              f"(it has {', '.join(sorted(known))})", file=sys.stderr)
        return 2
    if spec.get("gpu"):
        why = gpu_here(a)
        if why:
            print(f"SKIP: {a.name} is a GPU fault and {why}; it runs on the GPU host")
            return SKIP
    elif (not importlib.util.find_spec("numpy")
          and cache_value(a.build, "TBE_REQUIRE_ORACLE") != "ON"):
        print(f"SKIP: {a.name}: the named cases and the campaign compare with the oracle, and "
              "NumPy is missing")
        return SKIP
    tree = os.path.join(a.build, "faults", a.name)
    os.makedirs(tree, exist_ok=True)
    build_s = build(a.name, spec, a, tree)
    a.faulty = os.path.join(tree, os.path.relpath(a.tbecheck, a.build))
    ver = subprocess.run([a.faulty, "--version"],
                         capture_output=True, text=True).stdout
    if f"fault    {a.name} " not in ver:
        print(f"faults.py: the tree {tree} is not built with {a.name}:\n{ver}", file=sys.stderr)
        return 1
    log(f"{a.name}: built in {build_s:.0f} s: {spec['breaks']}")
    engines = "ref,gpu" if spec.get("gpu") else "ref,oracle"
    results = []
    wanted = lambda d: only is None or d in only
    for test in filter(wanted, spec["tests"]):
        status, secs, tail = run_test(tree, test)
        results.append(dict(detector=test, detected=status == "fail", status=status,
                            seconds=secs, why=tail))
    gpu = bool(spec.get("gpu"))
    if wanted("cases"):
        results.append(run_cases(a, tree, engines, GPU_CASES if gpu else CPU_CASES,
                                 first_only=gpu))
    if wanted("fuzz"):
        results.append(run_fuzz(a, tree, engines))
    for r in results:
        how = (f"after {r['cases']} cases, {r['seconds']:.1f} s" if "cases" in r and r["detected"]
               else f"{r['seconds']:.1f} s" if r["detected"] else "")
        log(f"  {r['detector']:<20} {'CAUGHT' if r['detected'] else 'missed':<7} {how}"
            f"{': ' + r['why'] if r.get('why') and r['detected'] else ''}")
    caught = {r["detector"] for r in results if r["detected"]}
    missing = [d for d in spec["expect"] if wanted(d) and d not in caught]
    ok = bool(caught) and not missing
    with open(os.path.join(tree, "result.json"), "w") as f:
        json.dump(dict(name=a.name, breaks=spec["breaks"], gpu=bool(spec.get("gpu")),
                       build_seconds=build_s, results=results, ok=ok,
                       detectors=sorted(only) if only else None), f, indent=1)
    if not caught:
        log(f"{a.name}: NOT CAUGHT by any detector: the suite misses this fault")
    elif missing:
        log(f"{a.name}: expected detectors that missed it: {', '.join(missing)}")
    else:
        log(f"{a.name}: caught by {', '.join(sorted(caught))}")
    return 0 if ok else 1


def build_only(a):
    spec = fault_spec(a.name)
    if not spec:
        return 2
    tree = os.path.join(a.build, "faults", a.name)
    os.makedirs(tree, exist_ok=True)
    log(f"{a.name}: built in {build(a.name, spec, a, tree):.0f} s")
    return 0


def comparison(why):
    """The comparison and status of a failure line: 'oracle:ref bounds offsets: fail: 2 of 17
    elements differ' -> 'oracle:ref bounds offsets: fail'."""
    return ": ".join(why.split(": ")[:2])


def table(a):
    """One FAULTS.md row per result under BUILD/faults, in FAULTS order."""
    log("| fault | what it breaks | detected by | how fast |")
    log("|---|---|---|---|")
    for name, spec in FAULTS.items():
        path = os.path.join(a.build, "faults", name, "result.json")
        if not os.path.exists(path):
            log(f"| `{name}` | {spec['breaks']} | not measured yet (see below) | - |")
            continue
        with open(path) as f:
            res = json.load(f)
        by, fast, missed = [], [], []
        for r in res["results"]:
            if not r["detected"]:
                missed.append(f"{r['detector']} ({r['seconds_total']:.0f} s)"
                              if "seconds_total" in r else r["detector"])
            elif r["detector"] == "cases":
                tally = ("the run stops at its first failure" if r.get("stopped") else
                         f"{r['failed']} of {r['cases_total']} named cases fail")
                by.append(f"named case `{r['case']}` ({comparison(r['why'])}; {tally})")
                fast.append(f"cases: {r['cases']} case(s), {r['seconds']:.1f} s")
            elif r["detector"] == "fuzz":
                by.append(f"fuzz case {r['cases']} ({comparison(r['why'])}), shrunk to "
                          f"`{r.get('shrunk', r['case'])}`")
                fast.append(f"fuzz: {r['cases']} case(s), {r['seconds']:.1f} s")
            else:
                by.append(f"`{r['detector']}`")
                fast.append(f"{r['detector']}: {r['seconds']:.2f} s")
        log(f"| `{name}` | {spec['breaks']} | {'; '.join(by) or 'NOT CAUGHT'}"
            f"{'; missed by ' + ', '.join(missed) if missed else ''} | {'; '.join(fast)} |")
    return 0


def names(a):
    want = {n: bool(s.get("gpu")) for n, s in FAULTS.items()}
    got = {**{n: False for n in a.cpu.split(";") if n}, **{n: True for n in a.gpu.split(";") if n}}
    if want != got:
        print(f"faults.py: CMakeLists.txt's TBE_FAULTS_CPU/GPU {got} differ from FAULTS {want}",
              file=sys.stderr)
        return 1
    print(f"pass: {len(got)} faults, {sum(got.values())} of them GPU faults")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("name")
    r.add_argument("--source", required=True)
    r.add_argument("--build", required=True, help="the clean build tree")
    r.add_argument("--tbecheck", required=True, help="the clean build's tbecheck")
    r.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    r.add_argument("--seconds", type=int, default=30, help="the campaign's budget")
    r.add_argument("--detectors", help="run only these detectors (comma-separated)")
    b = sub.add_parser("build")
    b.add_argument("name")
    b.add_argument("--source", required=True)
    b.add_argument("--build", required=True, help="the clean build tree (configured)")
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    t = sub.add_parser("table")
    t.add_argument("build")
    n = sub.add_parser("names")
    n.add_argument("cpu")
    n.add_argument("gpu")
    a = p.parse_args()
    for k in ("source", "build", "tbecheck"):
        if getattr(a, k, None):
            setattr(a, k, os.path.abspath(getattr(a, k)))
    return {"run": run, "build": build_only, "table": table, "names": names}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
