#!/usr/bin/env python3
"""html_report.py: `tbecheck report --html`: one self-contained HTML page (inline CSS and SVG;
no script, font, stylesheet or link outside the file) of a run or campaign, drawn from the
results database through the queries of reports/queries/. Not the text report (tbecheck.c
prints that) and not a query: every number shown comes from one of those .sql files.

usage: html_report.py --db PATH --run N --out FILE [--since COMMIT]
tbecheck report --html runs it after it has checked the database, the run and --since.
Exit 0 written, 2 bad input (FILE cannot be written), 3 otherwise (matplotlib missing).

The page, after pytest-html (one file), ggml's compare-llama-bench (tables and plots across
commits from SQLite) and airspeed velocity (speed history with step flags): the run or
campaign; the summary per engine pair and path, whose cells link to the details; the failures
with their violations and replay command; the error/bound ratios per bound-checked path on a
log scale beside the 1.0 line, and the bit-exact fraction of the bitwise paths; numeric drift
and speed across commits, and the forward sweep (ours / the gather ceiling, a quotient of two of
perf_drift's times, per axis); flaky cases. Plots are matplotlib figures in its SVG backend.
"""

import argparse
import html
import io
import math
import os
import re
import shlex
import sqlite3
import sys
import urllib.parse

QUERIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "queries")
MAX_DETAILED = 20     # failures shown in full (the rest: one row each)
MAX_LISTED = 500      # failures and bit changes listed at all
MAX_VIOLATIONS = 10   # violations shown per failure (as run's --max-violations default)
SWEEP = "SW-"         # the forward sweep's shapes (cases/bench.cases: SW-base, SW-<axis><value>,
                      # SW-<variant>), timed by gpu_forward_bench --sweep

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 2em 3em;color:#222;max-width:1200px}
h1{font-size:1.5em;margin:.8em 0 .2em}h2{border-bottom:2px solid #ccd;margin-top:1.6em}
h3{margin:1.2em 0 .3em;font-size:1.05em}
nav a{margin-right:1em}table{border-collapse:collapse;margin:.4em 0}
td,th{border:1px solid #ccd;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#eef}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td,td.bad{background:#fdd}tr.changed td{background:#fec}td.ok{background:#dfd}
tr.regression td{background:#fcc}tr.maybe td{background:#fec}
pre{background:#f4f4f8;padding:6px;white-space:pre-wrap;word-break:break-all;margin:.3em 0}
pre.replay{background:#eef6ee;border-left:3px solid #4a4}
.case{font-family:monospace}.note{color:#555}.failure{border:1px solid #ccd;padding:0 1em;
margin:1em 0}.plots{display:flex;flex-wrap:wrap;gap:1em}.plots figure{margin:0}
figcaption{font-size:.9em;color:#444}
"""


class BadInput(Exception):
    pass


def connect(path):
    """A reader's connection, as harness/store/db.c opens one: an archived database (no WAL
    file, a directory we may not write) read as immutable; one we may write through a
    read-write connection held to queries, which, closing last, removes the -wal and -shm a
    read made; any other read-only."""
    archived = not os.path.exists(path + "-wal") and \
        not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)
    tidy = not archived and os.access(path, os.W_OK)
    uri = "file:" + urllib.parse.quote(path) + ("?immutable=1" if archived else
                                                "?mode=rw" if tidy else "?mode=ro")
    con = sqlite3.connect(uri, uri=True)
    if tidy:
        con.execute("PRAGMA query_only = 1")
    return con


def query(con, name, **params):
    """The rows of reports/queries/<name>.sql as dicts; parameters not given are NULL."""
    with open(os.path.join(QUERIES, name + ".sql")) as f:
        sql = f.read()
    names = set(re.findall(r":([a-z_]+)", sql))
    cur = con.execute(sql, {n: params.get(n) for n in names})
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def esc(v):
    return "-" if v is None else html.escape(str(v))


def anchor(*parts):
    """An id for an anchor: parts joined, anything but letters and digits as '-'."""
    return re.sub(r"[^A-Za-z0-9]+", "-", "-".join(str(p) for p in parts)).strip("-")


def table(cols, rows, row_attrs=None, cell=None):
    """An HTML table: cols are (key, heading); cell(row, key) gives a cell's inner HTML (default
    the escaped value), row_attrs(row) a row's attributes. Numbers are right-aligned."""
    out = ["<table><tr>" + "".join(f"<th>{esc(h)}</th>" for _, h in cols) + "</tr>"]
    for r in rows:
        attrs = row_attrs(r) if row_attrs else ""
        tds = []
        for k, _ in cols:
            v = r.get(k)
            inner = cell(r, k) if cell else None
            num = isinstance(v, (int, float)) or (isinstance(v, str) and
                                                 re.fullmatch(r"[-+]?[0-9.e+%-]+", v or ""))
            tds.append(f'<td data-col="{k}"{" class=num" if num else ""}>'
                       f'{esc(v) if inner is None else inner}</td>')
        out.append(f"<tr{attrs}>" + "".join(tds) + "</tr>")
    return "\n".join(out + ["</table>"])


# ---- plots: matplotlib's SVG backend, inlined ----

def plt_module():
    try:
        import matplotlib
    except ImportError:
        print(f"tbecheck report: matplotlib is not installed for {sys.executable}: "
              f"{sys.executable} -m pip install matplotlib (or set TBECHECK_PYTHON)",
              file=sys.stderr)
        sys.exit(3)
    matplotlib.use("svg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.titlesize": 10})
    return plt


def svg(plt, fig, name):
    """The figure as an inline <svg> element: no XML prolog, doctype or metadata; its ids salted
    with name, so several figures on one page do not share clip-path ids."""
    plt.rcParams["svg.hashsalt"] = name
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def log_bins(values):
    """Bin edges, evenly spaced in log10, spanning the values and 1.0."""
    lo = math.floor(math.log10(min(values + [1.0])) * 4) / 4
    hi = math.ceil(math.log10(max(values + [1.0])) * 4) / 4 + 0.25
    n = max(1, int(round((hi - lo) * 4)))
    return [10 ** (lo + (hi - lo) * i / n) for i in range(n + 1)]


def ratio_histogram(plt, pair, path, ratios, zeros, infinite):
    fig, ax = plt.subplots(figsize=(4.6, 2.4))
    if ratios:
        edges = log_bins(ratios)
        counts, _, patches = ax.hist(ratios, bins=edges, color="#5577aa")
        for p, left in zip(patches, edges):
            if left >= 1.0:
                p.set_facecolor("#cc3333")
    ax.set_xscale("log")
    ax.axvline(1.0, color="#cc3333", linestyle="--", linewidth=1.2)
    ax.text(1.0, 0.95, " bound", color="#cc3333", transform=ax.get_xaxis_transform(),
            va="top", fontsize=8)
    ax.set_xlabel("worst |got - exact| / bound per result (log)")
    ax.set_ylabel("results")
    ax.set_title(f"{pair} {path}: {len(ratios) + zeros + infinite} results"
                 + (f", {zeros} at ratio 0" if zeros else "")
                 + (f", {infinite} infinite (an error over a zero bound)" if infinite else "")
                 + (" (not drawn)" if zeros or infinite else ""), fontsize=8)
    return svg(plt, fig, f"hist-{pair}-{path}")


def exact_bars(plt, rows):
    fig, ax = plt.subplots(figsize=(6, 0.4 + 0.35 * len(rows)))
    labels = [f"{r['pair']} {r['path']}" for r in rows]
    fr = [r["fraction"] for r in rows]
    ax.barh(labels, fr, color=["#5577aa" if f == 1 else "#cc3333" for f in fr])
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("fraction of elements bit-exact")
    for i, f in enumerate(fr):
        ax.text(min(f, 0.98), i, f" {f:.6f}", va="center", ha="right" if f > 0.5 else "left",
                color="white" if f > 0.5 else "black", fontsize=8)
    return svg(plt, fig, "exact")


def drift_plot(plt, pair, path, rows, labels):
    """Per code in commit order: the worst ratio (bound paths) or ulp (bitwise), and the outputs
    whose bits changed as bars; commits where bits changed are marked."""
    xs = [r["ord"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.2, 2.4))
    ratio = [None if r["worst_ratio"] in (None, "-") or float(r["worst_ratio"]) == math.inf
             else float(r["worst_ratio"]) for r in rows]
    if any(v is not None for v in ratio):
        pts = [(x, v) for x, v in zip(xs, ratio) if v is not None]
        ax.plot([p[0] for p in pts], [max(p[1], 1e-20) for p in pts], "o-", color="#5577aa",
                label="worst error/bound")
        ax.axhline(1.0, color="#cc3333", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        ax.set_ylabel("worst error/bound")
    else:
        ax.plot(xs, [r["worst_ulp"] or 0 for r in rows], "o-", color="#5577aa", label="worst ulp")
        ax.set_ylabel("worst ulp")
    ax2 = ax.twinx()
    changed = [r["bits_changed"] for r in rows]
    ax2.bar(xs, changed, width=0.35, color="#ee9933", alpha=0.6, label="outputs, bits changed")
    ax2.set_ylabel("bits changed")
    ax2.set_ylim(0, max(changed + [1]) * 1.25)
    for x, c in zip(xs, changed):
        if c:
            ax.axvline(x, color="#ee9933", linewidth=1, linestyle=":")
            ax2.annotate(f"{c} changed", (x, c), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels([labels[x] for x in xs], rotation=20, ha="right", fontsize=7)
    ax.set_title(f"{pair} {path}")
    return svg(plt, fig, f"drift-{pair}-{path}")


def perf_plot(plt, shape, series, labels):
    """ms and GB/s per code in commit order of every kernel and configuration of one shape;
    flagged regressions are red triangles."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.5, 2.8))
    ceiling = {}
    for key, rows in series.items():
        xs = [r["ord"] for r in rows]
        name = f"{key[0]} {key[1]}" if key[1] != "default" else key[0]
        a1.plot(xs, [float(r["ms"]) for r in rows], "o-", label=name, markersize=4)
        a2.plot(xs, [float(r["gbps"]) for r in rows], "o-", label=name, markersize=4)
        for r in rows:
            if r["flag"]:
                a1.plot([r["ord"]], [float(r["ms"])], "v", color="#cc0000", markersize=10)
                a1.annotate(r["flag"], (r["ord"], float(r["ms"])), color="#cc0000", fontsize=8,
                            textcoords="offset points", xytext=(4, 4))
            if r["ceiling_gbps"] != "-":
                ceiling[r["ord"]] = float(r["ceiling_gbps"])
    if ceiling:
        xs = sorted(ceiling)
        a2.plot(xs, [ceiling[x] for x in xs], "--", color="#888888", label="copy ceiling")
    allx = sorted({r["ord"] for rows in series.values() for r in rows})
    for a, what in ((a1, "ms (fastest figure)"), (a2, "GB/s")):
        a.set_xticks(allx)
        a.set_xticklabels([labels[x] for x in allx], rotation=20, ha="right", fontsize=7)
        a.set_ylabel(what)
        a.set_ylim(bottom=0)
    a2.legend(fontsize=7, loc="best")
    fig.suptitle(f"{shape} ({next(iter(series))[2]})", fontsize=10)
    return svg(plt, fig, f"perf-{shape}")


def sweep_points(perf):
    """The forward sweep at the latest code of each machine that ran it: {machine: (code,
    [(shape, ours ms, ceiling ms)])} from perf_drift's gpu:forward and ceiling:gather figures of
    the SW- shapes in their own configuration; a shape without both figures is left out."""
    ms = {}
    for r in perf:
        if r["shape"].startswith(SWEEP) and r["config"] == "default" and \
                r["kernel"] in ("gpu:forward", "ceiling:gather"):
            at = ms.setdefault(r["machine"], {}).setdefault(r["ord"], (r["code"], {}))
            at[1].setdefault(r["shape"], {})[r["kernel"]] = float(r["ms"])
    out = {}
    for machine, codes in ms.items():
        code, shapes = codes[max(codes)]
        points = [(shape, k["gpu:forward"], k["ceiling:gather"]) for shape, k in shapes.items()
                  if len(k) == 2]
        if points:
            out[machine] = (code, points)
    return out


def sweep_plot(plt, machine, code, points):
    """ours / ceiling time per sweep point: one panel per numeric axis (SW-L64: axis L, value 64,
    log2 scale; an axis is capitals, as the letters of TBE_SEMANTICS.md), one for the other
    variants (SW-fp32), each with the 1.0 line (level with the
    ceiling) and SW-base's ratio dotted. None when there is nothing beside SW-base."""
    axes, variants, base = {}, [], None
    for shape, ours, ceiling in sorted(points):
        rest, ratio = shape[len(SWEEP):], ours / ceiling
        m = re.fullmatch(r"([A-Z]+)([0-9]+)", rest)
        if rest == "base":
            base = ratio
        elif m:
            axes.setdefault(m.group(1), []).append((int(m.group(2)), ratio))
        else:
            variants.append((rest, ratio))
    panels = sorted(axes) + (["variants"] if variants else [])
    if not panels:
        return None
    fig, axs = plt.subplots(1, len(panels), figsize=(3.3 * len(panels), 2.6), sharey=True,
                            squeeze=False)
    for a, name in zip(axs[0], panels):
        if name == "variants":
            a.plot(range(len(variants)), [r for _, r in variants], "o", color="#5577aa")
            a.set_xticks(range(len(variants)))
            a.set_xticklabels([v for v, _ in variants], rotation=20, ha="right", fontsize=7)
        else:
            pts = sorted(axes[name])
            a.plot([v for v, _ in pts], [r for _, r in pts], "o-", color="#5577aa",
                   markersize=4)
            a.set_xscale("log", base=2)
            a.set_xticks([v for v, _ in pts])
            a.set_xticklabels([str(v) for v, _ in pts], rotation=45, fontsize=7)
            a.minorticks_off()
            a.set_xlabel(name)
        a.axhline(1.0, color="#888888", linestyle="--", linewidth=1, label="level")
        if base is not None:
            a.axhline(base, color="#ee9933", linestyle=":", linewidth=1.2, label="SW-base")
    axs[0][0].set_ylabel("ours / ceiling (time)")
    axs[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(f"forward sweep at {code} ({machine})", fontsize=10)
    return svg(plt, fig, f"sweep-{machine}")


# ---- sections ----

def fault_args(argv):
    """The --inject-fault argument of a run's command line, or None."""
    words = shlex.split(argv or "")
    for i, w in enumerate(words):
        if w == "--inject-fault" and i + 1 < len(words):
            return words[i + 1]
        if w.startswith("--inject-fault="):
            return w.split("=", 1)[1]
    return None


def replay_command(canonical, run):
    """The tbecheck command that reruns a case as its run did: its engines and its fault."""
    if canonical.startswith("import "):
        return None
    cmd = ["tbecheck", "replay", canonical, "--engines", run["engines"]]
    fault = fault_args(run["argv"]) if run["injected"] else None
    if fault:
        cmd += ["--inject-fault", fault]
    return " ".join(shlex.quote(w) for w in cmd)


def heading(sid, title, intro):
    """A section's first lines: its <h2> (the anchor the navigation links to) and a paragraph."""
    return [f'<h2 id="{sid}">{title}</h2>', f"<p>{intro}</p>"]


def section_runs(runs):
    head = runs[0]
    shards = {r["shard"] for r in runs if r["shard"]}
    want = int(next(iter(shards)).split("/")[1]) if shards else 1
    complete = all(r["complete"] == 1 for r in runs) and (not shards or len(shards) == want)
    what = (f"campaign {esc(head['campaign'])}: {len(runs)} runs, shards "
            f"{', '.join(sorted(shards))} of {want}" if len(runs) > 1 or head["campaign"]
            else f"run {head['run']}")
    out = [f'<h2 id="runs">The {"campaign" if len(runs) > 1 else "run"}</h2>',
           f'<p id="completeness" data-complete="{int(complete)}">{what}: '
           f'<b>{"complete" if complete else "INCOMPLETE"}</b>'
           f'{"" if complete else " (a shard is missing or did not finish)"}</p>']
    cols = [("run", "run"), ("shard", "shard"), ("git_commit", "commit"), ("dirty", "dirty"),
            ("host", "host"), ("cpu", "CPU"), ("gpu", "GPU"), ("gpu_uuid", "GPU UUID"),
            ("driver", "driver"), ("cuda", "CUDA"), ("tool_version", "tbecheck"),
            ("engines", "engines"), ("engine_versions", "external engines"),
            ("started", "started"), ("ended", "ended"), ("complete", "complete"),
            ("injected", "injected"), ("cases", "cases"), ("results", "results"),
            ("argv", "arguments")]
    out.append(table(cols, runs, row_attrs=lambda r: f' id="run-{r["run"]}"' +
                     (' class="bad"' if not r["complete"] or r["injected"] else "")))
    return "\n".join(out)


def listed_failures(failures):
    """The failures the page shows (the rest are counted), in its order."""
    return sorted(failures, key=lambda f: (f["pair"], f["path"], f["result"]))[:MAX_LISTED]


def section_summary(summary, failures, worst, ratios):
    """The summary per pair and path; fail and error counts link to that path's failures, the
    worst ulp and ratio to a table of the results that have them (each of which links on to its
    failure, where the page shows it). Every link has its anchor on the page."""
    shown = listed_failures(failures)
    fail_keys = {anchor(f["pair"], f["path"]) for f in shown}
    shown_ids = {f["result"] for f in shown}
    by_id = {r["result"]: r for r in ratios}

    def cell(r, k):
        key = (r["pair"], r["path"])
        if k in ("fail", "error") and r[k] and anchor(*key) in fail_keys:
            return f'<a href="#fail-{anchor(*key)}">{esc(r[k])}</a>'
        if k in ("worst_ulp", "worst_ratio") and key in worst.get(k, {}):
            return f'<a href="#worst-{worst[k][key]}">{esc(r[k])}</a>'
        return None
    cols = [("pair", "engine pair"), ("path", "path"), ("cases", "cases"), ("pass", "pass"),
            ("fail", "fail"), ("error", "error"), ("skip", "skip"),
            ("unsupported", "unsupported"), ("worst_ulp", "worst ulp"),
            ("worst_ratio", "worst error/bound")]
    attrs = lambda r: (f' id="sum-{anchor(r["pair"], r["path"])}" data-pair="{esc(r["pair"])}"'
                       f' data-path="{esc(r["path"])}"' +
                       (' class="bad"' if r["fail"] or r["error"] else ""))
    worst_rows = []
    for k, label in (("worst_ulp", "worst ulp"), ("worst_ratio", "worst error/bound")):
        for key, rid in sorted(worst.get(k, {}).items()):
            r = by_id[rid]
            worst_rows.append(dict(result=rid, what=label, pair=r["pair"], path=r["path"],
                                   output=r["output"], status=r["status"], run=r["run"],
                                   case=r["case_id"],
                                   value=r["max_ulp"] if k == "worst_ulp"
                                   else f'{r["worst_bound_ratio"]:.6g}'))
    worst_cell = lambda r, k: (f'<a href="#result-{r["result"]}">{r["result"]}</a>'
                               if k == "result" and r["result"] in shown_ids else None)
    n_bad = len(failures)
    return "\n".join([
        '<h2 id="summary">Summary per engine pair and path</h2>',
        f'<p>{n_bad} failed or errored result{"s" if n_bad != 1 else ""}. A case counts once '
        'per run, pair and path, with the worst status of its outputs; fail and error counts '
        'link to the failures, the worst values to the result that has them.</p>',
        table(cols, summary, attrs, cell),
        '<h3 id="worst">The results with the worst values</h3>' if worst_rows else "",
        table([("result", "result"), ("what", "worst"), ("value", "value"), ("pair", "pair"),
               ("path", "path"), ("output", "output"), ("status", "status"), ("run", "run"),
               ("case", "case")], worst_rows,
              lambda r: f' id="worst-{r["result"]}"', worst_cell) if worst_rows else ""])


def section_failures(con, failures, runs_by_id):
    out = ['<h2 id="failures">Failures</h2>']
    if not failures:
        return out[0] + "\n<p>None: every compared output passed.</p>"
    seen_paths = set()
    rest = []  # past MAX_DETAILED: one row each
    for i, f in enumerate(listed_failures(failures)):
        key = anchor(f["pair"], f["path"])
        first = key not in seen_paths
        seen_paths.add(key)
        if i >= MAX_DETAILED:
            rest.append(dict(f, first=key if first else None))
            continue
        if first:
            out.append(f'<h3 id="fail-{key}">{esc(f["pair"])} {esc(f["path"])}</h3>')
        r = query(con, "result", id=f["result"])[0]
        viol = query(con, "violations", id=f["result"])[:MAX_VIOLATIONS]
        cmd = replay_command(f["canonical"], runs_by_id[f["run"]])
        metrics = (f'{r["metric"]}: elements {r["elements"]}, bit-exact {r["exact"]}, '
                   f'violations {r["violations"]}, max ulp {r["max_ulp"]}, max abs '
                   f'{r["max_abs"]}, max rel {r["max_rel"]}'
                   + (f', worst error/bound {r["worst_bound_ratio"]:.6g}'
                      if r["worst_bound_ratio"] is not None else "")
                   if r["elements"] is not None else "not compared")
        out.append(
            f'<div class="failure" id="result-{f["result"]}" data-result="{f["result"]}">'
            f'<h4>result {f["result"]}: {esc(f["pair"])} {esc(f["path"])} {esc(f["output"])}'
            f' &mdash; {esc(f["status"])} (run {f["run"]}, case {f["case"]}, repeat '
            f'{f["repeat"]})</h4>'
            f'<p>case</p><pre class="case">{esc(f["canonical"])}</pre>'
            f'<p>comparison: {esc(f["pair"])} (engine:baseline), {esc(metrics)}</p>'
            f'<p>reason: {esc(f["reason"])}</p>')
        if viol:
            out.append(f'<p>first violations ({len(viol)} of {r["violations"]} shown):</p>')
            out.append(table([("element", "element"), ("coordinates", "coordinates"),
                              ("expected", "expected"), ("got", "got"), ("bound", "bound")],
                             viol))
        if cmd:
            out.append(f'<p>replay:</p><pre class="replay">{esc(cmd)}</pre>')
        else:
            out.append('<p>an imported batch: rerun it with <code>tbecheck import DIR</code></p>')
        out.append("</div>")
    if rest:
        out.append(f"<h3>{len(rest)} further failures, in short</h3>")
        first = lambda r, k: (f'<a id="fail-{r["first"]}"></a>{r["result"]}'
                              if k == "result" and r["first"] else None)
        out.append(table([("result", "result"), ("run", "run"), ("case", "case"),
                          ("pair", "pair"), ("path", "path"), ("output", "output"),
                          ("status", "status"), ("reason", "reason"), ("canonical", "case text")],
                         rest, lambda r: f' id="result-{r["result"]}" data-result="{r["result"]}"',
                         first))
    if len(failures) > MAX_LISTED:
        out.append(f"<p>... and {len(failures) - MAX_LISTED} more (tbecheck list --failed).</p>")
    return "\n".join(out)


def section_closeness(plt, ratios):
    out = heading("bounds", "How close to the bound",
                  'Bound-checked paths: the worst error/bound ratio of each result, on a log scale; '
                  'the dashed line is the bound (1.0), a bar at or past it is red. Bitwise paths: the '
                  'fraction of elements identical to the model bit for bit.')
    bound, exact = {}, {}
    for r in ratios:
        key = (r["pair"], r["path"])
        if r["metric"] == "bound_ratio" and r["worst_bound_ratio"] is not None:
            bound.setdefault(key, []).append(r["worst_bound_ratio"])
        elif r["metric"] == "bitwise":
            e = exact.setdefault(key, [0, 0, 0, 0])
            e[0] += r["elements"]
            e[1] += r["exact"]
            e[2] += 1
            e[3] += r["exact"] == r["elements"]
    rows = []
    figs = []
    for (pair, path), vals in sorted(bound.items()):
        pos = [v for v in vals if 0 < v < math.inf]
        zeros, infinite = sum(v == 0 for v in vals), sum(v == math.inf for v in vals)
        figs.append(f'<figure id="hist-{anchor(pair, path)}">'
                    f'{ratio_histogram(plt, pair, path, pos, zeros, infinite)}'
                    f'<figcaption>{esc(pair)} {esc(path)}</figcaption></figure>')
        rows.append({"pair": pair, "path": path, "results": len(vals),
                     "at_zero": zeros, "over_half": sum(v > 0.5 for v in vals),
                     "over_bound": sum(v > 1 for v in vals), "worst_ratio": f"{max(vals):.3e}"})
    if figs:
        out.append('<div class="plots">' + "\n".join(figs) + "</div>")
        out.append(table([("pair", "engine pair"), ("path", "path"), ("results", "results"),
                          ("at_zero", "ratio 0"), ("over_half", "ratio > 0.5"),
                          ("over_bound", "ratio > 1"), ("worst_ratio", "worst")], rows,
                         lambda r: f' data-hist="{esc(r["pair"])} {esc(r["path"])}"'))
    else:
        out.append("<p>No bound-checked result.</p>")
    erows = [{"pair": p, "path": q, "elements": e[0], "exact": e[1],
              "fraction": e[1] / e[0] if e[0] else 1.0, "results": e[2], "exact_results": e[3]}
             for (p, q), e in sorted(exact.items())]
    if erows:
        out.append('<h3 id="bit-exact">Bit-exact fraction of the bitwise paths</h3>')
        out.append(exact_bars(plt, erows))
        for r in erows:
            r["fraction"] = f"{r['fraction']:.6f}"
        out.append(table([("pair", "engine pair"), ("path", "path"), ("elements", "elements"),
                          ("exact", "bit-exact"), ("fraction", "fraction"),
                          ("results", "results"), ("exact_results", "all bit-exact")], erows))
    return "\n".join(out)


def section_drift(plt, drift, changes, labels):
    out = heading("drift", "Numeric drift across commits",
                  'Per path, against commit order: the worst error/bound ratio (or ulp, bitwise), and '
                  'the outputs whose bits differ from their previous execution (bars; a dotted line marks '
                  'the commit). Dirty trees and fault-injected runs are codes of their own.')
    if not drift:
        return "\n".join(out + ["<p>No results.</p>"])
    paths = {}
    for r in drift:
        paths.setdefault((r["pair"], r["path"]), []).append(r)
    figs = [f'<figure id="drift-{anchor(*k)}">{drift_plot(plt, k[0], k[1], rows, labels)}'
            f'</figure>' for k, rows in paths.items()]
    out.append('<div class="plots">' + "\n".join(figs) + "</div>")
    cols = [("ord", "#"), ("code", "code"), ("pair", "engine pair"), ("path", "path"),
            ("results", "results"), ("worst_ulp", "worst ulp"), ("worst_ratio", "worst ratio"),
            ("bits_changed", "bits changed"), ("cases_changed", "cases"),
            ("status_changed", "status changed")]
    out.append(table(cols, drift, lambda r: (' class="changed"' if r["bits_changed"] else "") +
                     f' data-ord="{r["ord"]}" data-pair="{esc(r["pair"])}"'
                     f' data-path="{esc(r["path"])}"'))
    out.append('<h3 id="bit-changes">Where a case\'s bits changed</h3>')
    if not changes:
        out.append("<p>Nowhere: every output has the bits of its previous execution.</p>")
    else:
        cols = [("code", "at"), ("prev_code", "since"), ("case_id", "case"), ("pair", "pair"),
                ("path", "path"), ("output", "output"), ("status", "status"), ("ulp", "ulp"),
                ("ratio", "ratio"), ("canonical", "case text")]
        out.append(table(cols, changes[:MAX_LISTED],
                         lambda r: f' class="changed" data-ord="{r["ord"]}"'
                                   f' data-result="{r["result"]}"'))
        if len(changes) > MAX_LISTED:
            out.append(f"<p>... and {len(changes) - MAX_LISTED} more "
                       "(reports/queries/commit_changes.sql).</p>")
    return "\n".join(out)


def section_sweep(plt, perf):
    """The forward sweep's plot and table per machine (sweep_points), or nothing without one."""
    out = []
    for machine, (code, points) in sweep_points(perf).items():
        plot = sweep_plot(plt, machine, code, points)
        out.append(f'<h3 id="sweep-{anchor(machine)}">Forward sweep at {esc(code)} on '
                   f'{esc(machine)}: ours / the gather ceiling on the same data</h3>')
        if plot:
            out.append(f'<figure id="sweep-plot-{anchor(machine)}">{plot}</figure>')
        rows = [{"shape": shape, "ours": f"{ours:.4f}", "ceiling": f"{ceiling:.4f}",
                 "ratio": f"{ours / ceiling:.3f}"} for shape, ours, ceiling in points]
        cols = [("shape", "shape"), ("ours", "ours ms"), ("ceiling", "ceiling:gather ms"),
                ("ratio", "ours / ceiling")]
        out.append(table(cols, rows, lambda r: f' data-sweep="{esc(r["shape"])}"'))
    return "\n".join(out)


def section_perf(plt, perf, labels):
    out = heading("perf", "Speed across commits",
                  'Benchmark figures (bench/ with --db) per shape, kernel and configuration, against '
                  'commit order. A step is flagged (after asv) when a commit is slower than the previous '
                  '(up to) 5 by more than their spread, at least 5%: <b>regression</b> when the next '
                  'commit stays slow, <b>regression?</b> on the latest commit. The forward sweep '
                  '(the SW- shapes of cases/bench.cases) is drawn at its latest code as ours / '
                  'the gather ceiling per axis: 1 is level, above 1 slower.')
    if not perf:
        return "\n".join(out + ["<p>No benchmark figures in this database.</p>"])
    shapes = {}
    for r in perf:
        shapes.setdefault((r["shape"], r["machine"]), {}).setdefault(
            (r["kernel"], r["config"], r["machine"]), []).append(r)
    figs = [f'<figure id="perf-{anchor(shape, machine)}">{perf_plot(plt, shape, series, labels)}'
            f'</figure>' for (shape, machine), series in shapes.items()]
    out.append('<div class="plots">' + "\n".join(figs) + "</div>")
    out.append(section_sweep(plt, perf))
    flagged = [r for r in perf if r["flag"]]
    out.append(f'<p id="regressions">{len(flagged)} flagged step{"s" if len(flagged) != 1 else ""}'
               + "".join(f'<br><b>{esc(r["flag"])}</b>: {esc(r["shape"])} {esc(r["kernel"])} '
                         f'{esc(r["config"])} at {esc(r["code"])}: {esc(r["ms"])} ms against '
                         f'{esc(r["base_ms"])} ({esc(r["change"])})' for r in flagged) + "</p>")
    cols = [("shape", "shape"), ("kernel", "kernel"), ("config", "configuration"),
            ("machine", "machine"), ("ord", "#"), ("code", "code"), ("figures", "figures"),
            ("ms", "ms"), ("ms_max", "ms max"), ("gbps", "GB/s"), ("ceiling_gbps", "ceiling GB/s"),
            ("base_ms", "previous best"), ("change", "change"), ("flag", "flag")]
    cls = {"regression": ' class="regression"', "regression?": ' class="maybe"'}
    out.append(table(cols, perf, lambda r: cls.get(r["flag"], "") +
                     f' data-shape="{esc(r["shape"])}" data-flag="{esc(r["flag"])}"'))
    return "\n".join(out)


def section_flaky(flaky):
    out = heading("flaky", "Flaky cases",
                  'Different bits for the same case and the same code: across the repeats of a run, '
                  'or the runs of one clean commit (reports/queries/flaky.sql; fault-injected runs left '
                  'out).')
    if not flaky:
        return "\n".join(out + ["<p>None.</p>"])
    cols = [("case", "case"), ("pair", "pair"), ("output", "output"), ("same_code", "same code"),
            ("distinct_bits", "distinct bits"), ("results", "results"), ("runs", "runs"),
            ("canonical", "case text")]
    return "\n".join(out + [table(cols, flaky, lambda r: ' class="bad" data-case="%s"' %
                                  r["case"])])


def build(con, run, since, db_path):
    plt = plt_module()
    runs = query(con, "campaign", run=run)
    runs_by_id = {r["run"]: r for r in runs}
    summary = query(con, "summary", run=run, campaign=1)
    failures = query(con, "failures", run=run, campaign=1)
    ratios = query(con, "ratios", run=run, campaign=1)
    worst = {"worst_ulp": {}, "worst_ratio": {}}
    best = {}
    for r in ratios:
        key = (r["pair"], r["path"])
        for k, v in (("worst_ulp", r["max_ulp"] if r["metric"] == "bitwise" else None),
                     ("worst_ratio", r["worst_bound_ratio"] if r["metric"] == "bound_ratio"
                      else None)):
            if v is not None and v > best.get((k, key), -1):
                best[(k, key)] = v
                worst[k][key] = r["result"]
    labels = {r["ord"]: r["code"] for r in query(con, "commits", since=since)}
    drift = query(con, "commit_drift", since=since)
    changes = query(con, "commit_changes", since=since)
    perf = query(con, "perf_drift", since=since)
    flaky = query(con, "flaky")
    head = runs_by_id.get(run, runs[0])
    title = (f"campaign {head['campaign']}" if len(runs) > 1 else f"run {run}")
    body = [
        f"<h1>tbecheck report: {esc(title)}</h1>",
        f'<p class="note">{esc(db_path)}; commit {esc(head["git_commit"])}'
        f'{" (dirty tree)" if head["dirty"] else ""}; '
        f'{"since commit " + esc(since) + "; " if since else ""}'
        f'{len(failures)} failed or errored results.</p>',
        '<nav><a href="#runs">runs</a><a href="#summary">summary</a>'
        '<a href="#failures">failures</a><a href="#bounds">bounds</a>'
        '<a href="#drift">drift</a><a href="#perf">speed</a><a href="#flaky">flaky</a></nav>',
        section_runs(runs),
        section_summary(summary, failures, worst, ratios),
        section_failures(con, failures, runs_by_id),
        section_closeness(plt, ratios),
        section_drift(plt, drift, changes, labels),
        section_perf(plt, perf, labels),
        section_flaky(flaky),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)} - tbecheck</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--since")
    a = ap.parse_args()
    con = connect(a.db)
    page = build(con, a.run, a.since, a.db)
    con.close()
    tmp = a.out + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, a.out)
    except OSError as e:
        print(f"tbecheck report: cannot write {a.out}: {e.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
