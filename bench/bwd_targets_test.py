#!/usr/bin/env python3
"""bwd_targets_test.py: bwd_targets.py on logs written in gpu_backward_bench's and the anchor's
own formats (their printf strings, copied here with %lld as %d): each target's figure and
verdict, a missed one named, a shape not run "not measured", the H200's targets in ms left
unjudged on another card. Needs no GPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bwd_targets  # noqa: E402

VAR = ("  %-13s %8.3f ms %6.0f GB/s | sort %6.3f class %6.3f short %7.3f long %7.3f | "
       "runs %d long %d chunks %d | %s")
FLOOR = ("  floor         %d lookups, %d runs: %.3f GB, %.3f ms at the copy ceiling "
         "(issue 20's count)")
HOIST = ("  hoist %-3s forward %8.3f ms backward %8.3f ms total %8.3f ms | sort %6.3f class "
         "%6.3f%s, in the forward %6.3f | %s")
ANCHOR = ("%s backward probe: runs %d; linearize %.3f sort(%d bits) %.3f rle+scan %.3f "
          "sum+adagrad %.3f total %.3f ms")


def bench_text():
    lines = ["# NVIDIA H200; 16 host threads; copy ceiling 4250 GB/s (4 GiB D2D, read + write)"]
    shapes = {"F1": (15.2, 2.8, 20.1, 11.5), "F3": (2.1, 0.6, 2.2, 1.0),
              "F4": (2.0, 0.5, 1.9, 1.38), "PUB": (15.1, 3.3, 15.0, 10.0)}
    for name, (ms, sort, atomic, floor) in shapes.items():
        lines.append("%-4s %s" % (name, "T=32 B=65536 E=1000000 D=128 L=32 opt=rowwise_adagrad"))
        lines.append(VAR % ("fused", ms + 0.1, 900, sort, 0.3, 10, 1, 28, 0, 0, "bit-exact"))
        lines.append(VAR % ("accum", ms, 900, sort, 0.3, 10, 1, 28, 0, 0, "bit-exact"))
        lines.append(VAR % ("accum-bulk", atomic, 900, sort, 0.3, 10, 1, 28, 0, 0,
                            "(bound: cases/gpu_backward.cases)"))
        lines.append(VAR % ("block8", ms - 1, 900, sort, 0.3, 10, 1, 28, 0, 0, "bit-exact"))
        lines.append(FLOOR % (67108864, 28000000, floor * 4.25, floor))
        if name == "F1":
            lines.append(HOIST % ("on", 7.0, 12.5, 19.5, 0, 0, " (hoisted)", 3.1, "bit-exact"))
    lines.append("SL sweep: T=1 B=262144 L=32 D=128 fp16, N = 8.4M lookups, every run of length SL")
    lines.append("  %8s %14s %14s %16s %16s" % ("SL", "thr=32 ms", "thr=256 ms", "shuffled ms",
                                                "shuf. block8 ms"))
    for sl, shuf in ((1, 3.6), (2, 2.5), (1024, 1.0)):
        lines.append("  %8d %14.3f %14.3f %16.3f %16.3f   %6.0f / %6.0f / %6.0f / %6.0f GB/s"
                     % (sl, 1.0, 1.0, shuf, shuf - 0.2, 900, 900, 800, 850))
    return "\n".join(lines) + "\n"


def anchor_text():
    return "\n".join([ANCHOR % ("F1", 28000000, 0.3, 25, 1.85, 0.39, 12.1, 14.6),
                      ANCHOR % ("SL 1", 8388608, 0.1, 23, 0.2, 0.1, 3.1, 3.5),
                      ANCHOR % ("SL 2", 4194304, 0.1, 22, 0.2, 0.1, 2.0, 2.3)]) + "\n"


def main():
    failures = []
    rows = {name: (fig, verdict) for name, fig, verdict in
            bwd_targets.targets(bench_text(), anchor_text())}

    def expect(name, verdict, figure_part):
        got = rows.get(name)
        if not got or got[1] != verdict or figure_part not in got[0]:
            failures.append(f"{name}: expected {verdict} with '{figure_part}', got {got}")

    expect("F1 <= 15.5 ms, sort included", "met", "15.200 ms; fastest deterministic: block8 14.200")
    expect("F1 <= 1.05 x the anchor", "met", "15.200 / 14.600 = 1.041")
    expect("F1 backward alone, hoisted, <= 13 ms", "met", "12.500 ms")
    expect("F3 <= 1.8 ms, sort included", "MISSED", "2.100 ms")
    expect("F4 <= 1.55 ms, sort excluded", "met", "1.500 ms")
    expect("F2 >= 85% of the copy ceiling, sort excluded", "not measured", "-")
    expect("F4 >= 85% of the copy ceiling, sort excluded", "met", "1.380 ms / 1.500 ms = 92.0%")
    expect("PUB >= 85% of the copy ceiling, sort excluded", "MISSED",
           "10.000 ms / 11.800 ms = 84.7%")
    expect("SL 1 <= 1.05 x the anchor", "met", "3.600 / 3.500 = 1.029; shuf. block8 0.971")
    expect("SL 2 <= 1.05 x the anchor", "MISSED", "2.500 / 2.300 = 1.087")
    expect("F1 accum: deterministic <= 1.10 x atomic", "met", "15.200 / 20.100 = 0.756")
    expect("F3 accum: deterministic <= 1.10 x atomic", "met", "2.100 / 2.200")
    expect("F4 accum: deterministic <= 1.10 x atomic", "met", "2.000 / 1.900 = 1.053")
    if any(name.startswith("SL 1024") for name in rows):
        failures.append("SL 1024 is past the target's range (1 to 256) but was judged")
    # a missing anchor: the anchor's targets are not measured, the others still judged
    rows = {name: verdict for name, _, verdict in bwd_targets.targets(bench_text())}
    if rows.get("F1 <= 1.05 x the anchor") != "not measured" or \
            rows.get("F1 <= 15.5 ms, sort included") != "met":
        failures.append(f"without the anchor's log: {rows}")
    # another card (the bench's first line names it): the targets in ms are the H200's, so their
    # figures print unjudged; the ratios are judged as on the H200
    h100 = bench_text().replace("# NVIDIA H200;", "# NVIDIA H100 80GB HBM3 (sm_90, 81079 MiB);")
    rows = {name: (fig, verdict) for name, fig, verdict in
            bwd_targets.targets(h100, anchor_text())}
    for name in ("F1 <= 15.5 ms, sort included", "F1 backward alone, hoisted, <= 13 ms",
                 "F3 <= 1.8 ms, sort included", "F4 <= 1.55 ms, sort excluded"):
        fig, verdict = rows.get(name, ("", None))
        if verdict != "other card" or "this run: NVIDIA H100 80GB HBM3)" not in fig:
            failures.append(f"on an H100, {name}: expected 'other card', got {rows.get(name)}")
    for name, verdict in (("F1 <= 1.05 x the anchor", "met"), ("SL 2 <= 1.05 x the anchor",
                          "MISSED"), ("PUB >= 85% of the copy ceiling, sort excluded", "MISSED")):
        if rows.get(name, (None, None))[1] != verdict:
            failures.append(f"on an H100, {name}: expected {verdict}, got {rows.get(name)}")
    for f in failures:
        print("FAIL:", f)
    print(f"{'FAIL' if failures else 'pass'}: bwd_targets on logs in the bench's formats")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
