#!/usr/bin/env python3
"""bwd_targets.py: issue 20's targets read from one run's gpu_backward_bench output and the anchor
probe's (../shared/anchors/backward_probe.cu, with and without --sl), each with its figure and
whether it holds. Not a benchmark: it reads logs (gpu_host.sh's bwdbench part calls it).

    bwd_targets.py BWDBENCH_TXT [ANCHOR_TXT]

"ours" is the default configuration (the bench's accum variant); the fastest deterministic
variant of each shape is named beside it, so a policy change can be read off the same table.
A target whose figures are missing from the logs (a shape not run) prints as "not measured".
The targets in milliseconds are the H200's: on another card (the bench's first line names it)
they print their figure as "other card", not judged; the ratios (to the anchor, to the copy
ceiling, deterministic to atomic) are measured side by side and judged on any card.
"""
import re
import sys

VARIANT = re.compile(r"^  (\S+)\s+([\d.]+) ms\s+\d+ GB/s \| sort\s+([\d.]+) class\s+([\d.]+) "
                     r"short\s+([\d.]+) long\s+([\d.]+) \| runs (\d+) long (\d+) chunks (\d+) "
                     r"\| (.*)$")
FLOOR = re.compile(r"^  floor\s+(\d+) lookups, (\d+) runs: ([\d.]+) GB, ([\d.]+) ms")
HOIST = re.compile(r"^  hoist (on|off)\s+forward\s+([\d.]+) ms backward\s+([\d.]+) ms")
SHAPE = re.compile(r"^([A-Z][A-Z0-9]*)\s+\S+=")
SWEEP_ROW = re.compile(r"^\s+(\d+)((?:\s+\d+\.\d{3})+)\s+[\d /]+GB/s")
ANCHOR = re.compile(r"^(F1|SL \d+) backward probe: .* total ([\d.]+) ms")
DEVICE = re.compile(r"^# ([^;(]+?)\s*[;(]")


def parse_bench(text):
    shapes, floors, hoist, sweep = {}, {}, {}, {}
    shape = None
    sweep_cols = None
    device = None
    for line in text.splitlines():
        m = DEVICE.match(line)
        if m and device is None:
            device = m.group(1)
            continue
        m = SHAPE.match(line)
        if m:
            shape = m.group(1)
            shapes.setdefault(shape, {})
            continue
        if line.startswith("SL sweep"):
            shape = None
            continue
        if line.strip().startswith("SL ") and "ms" in line:
            sweep_cols = re.findall(r"([\w=.]+(?: [\w.]+)?) ms", line)
            continue
        m = VARIANT.match(line)
        if m and shape:
            # a deterministic variant is held to the reference's bits, an atomic one by its bound
            shapes[shape][m.group(1)] = {"ms": float(m.group(2)), "sort": float(m.group(3)),
                                         "deterministic": m.group(10).startswith("bit-exact")}
            continue
        m = FLOOR.match(line)
        if m and shape:
            floors[shape] = float(m.group(4))
            continue
        m = HOIST.match(line)
        if m and shape:
            hoist[(shape, m.group(1))] = float(m.group(3))
            continue
        m = SWEEP_ROW.match(line)
        if m and sweep_cols is not None and shape is None:
            sweep[int(m.group(1))] = [float(x) for x in m.group(2).split()]
    return shapes, floors, hoist, sweep, sweep_cols, device


def parse_anchor(text):
    return {m.group(1): float(m.group(2)) for m in map(ANCHOR.match, text.splitlines()) if m}


def fastest(variants):
    det = {k: v["ms"] for k, v in variants.items() if v["deterministic"]}
    return min(det.items(), key=lambda kv: kv[1]) if det else None


def targets(bench_text, anchor_text=""):
    """Rows (target, figure, verdict): verdict 'met', 'MISSED', 'not measured' or 'other card'
    (a target in milliseconds, the H200's, on a run that names another card)."""
    shapes, floors, hoist, sweep, cols, device = parse_bench(bench_text)
    anchor = parse_anchor(anchor_text)
    rows = []
    other = device is not None and "H200" not in device

    def row(name, figure, ok, ms_target=False):
        if ms_target and other and ok is not None:
            rows.append((name, f"{figure} (an H200 target; this run: {device})", "other card"))
            return
        rows.append((name, figure, "not measured" if ok is None else "met" if ok else "MISSED"))

    def ours(shape):
        return shapes.get(shape, {}).get("accum")

    def best(shape):
        b = fastest(shapes.get(shape, {}))
        return f"; fastest deterministic: {b[0]} {b[1]:.3f} ms" if b else ""

    f1 = ours("F1")
    row("F1 <= 15.5 ms, sort included", f"{f1['ms']:.3f} ms{best('F1')}" if f1 else "-",
        f1["ms"] <= 15.5 if f1 else None, ms_target=True)
    a = anchor.get("F1")
    row("F1 <= 1.05 x the anchor", f"{f1['ms']:.3f} / {a:.3f} = {f1['ms'] / a:.3f}"
        if f1 and a else "-", f1["ms"] <= 1.05 * a if f1 and a else None)
    h = hoist.get(("F1", "on"))
    row("F1 backward alone, hoisted, <= 13 ms", f"{h:.3f} ms" if h else "-",
        h <= 13 if h else None, ms_target=True)
    f3 = ours("F3")
    row("F3 <= 1.8 ms, sort included", f"{f3['ms']:.3f} ms{best('F3')}" if f3 else "-",
        f3["ms"] <= 1.8 if f3 else None, ms_target=True)
    f4 = ours("F4")
    x = f4["ms"] - f4["sort"] if f4 else None
    row("F4 <= 1.55 ms, sort excluded", f"{x:.3f} ms" if f4 else "-", x <= 1.55 if f4 else None,
        ms_target=True)
    for s in ("F2", "F4", "PUB"):
        o, fl = ours(s), floors.get(s)
        if o and fl:
            frac = fl / (o["ms"] - o["sort"])
            row(f"{s} >= 85% of the copy ceiling, sort excluded",
                f"floor {fl:.3f} ms / {o['ms'] - o['sort']:.3f} ms = {100 * frac:.1f}%",
                frac >= 0.85)
        else:
            row(f"{s} >= 85% of the copy ceiling, sort excluded", "-", None)
    shuffled = cols.index("shuffled") if cols and "shuffled" in cols else None
    for sl in sorted(sweep):
        a = anchor.get(f"SL {sl}")
        if sl > 256:
            continue
        if a is None or shuffled is None:
            row(f"SL {sl} <= 1.05 x the anchor", "-", None)
            continue
        figs = sweep[sl]
        extra = "".join(f"; {c} {v / a:.3f}" for c, v in zip(cols, figs)
                        if c not in ("shuffled", "thr=32", "thr=256"))
        row(f"SL {sl} <= 1.05 x the anchor", f"{figs[shuffled]:.3f} / {a:.3f} = "
            f"{figs[shuffled] / a:.3f}{extra}", figs[shuffled] <= 1.05 * a)
    for s, v in shapes.items():
        for mode in ("accum", "fused"):
            det = v.get(mode)
            atom = [v[k]["ms"] for k in (f"{mode}-atomic", f"{mode}-bulk") if k in v]
            if det and atom:
                r = det["ms"] / min(atom)
                row(f"{s} {mode}: deterministic <= 1.10 x atomic",
                    f"{det['ms']:.3f} / {min(atom):.3f} = {r:.3f}", r <= 1.10)
    return rows


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[1])
    bench = open(sys.argv[1]).read()
    anchor = open(sys.argv[2]).read() if len(sys.argv) == 3 else ""
    rows = targets(bench, anchor)
    width = max(len(r[0]) for r in rows)
    for name, figure, verdict in rows:
        print(f"{name:<{width}}  {verdict:<12}  {figure}")
    print(f"{sum(r[2] == 'met' for r in rows)} met, {sum(r[2] == 'MISSED' for r in rows)} "
          f"missed, {sum(r[2] == 'not measured' for r in rows)} not measured, "
          f"{sum(r[2] == 'other card' for r in rows)} on another card than the H200")


if __name__ == "__main__":
    main()
