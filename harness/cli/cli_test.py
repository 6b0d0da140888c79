#!/usr/bin/env python3
"""cli_test.py: tests of the `tbecheck` command line and its results database, as a user meets
them: usage and exit codes, bad input, databases that are not ours, SIGKILL mid-run, concurrent
writers, a full disk, injected faults, merge, import, replay, the live progress line, and every
query of reports/queries/. Not the unit tests (harness/*/*_test.c).

usage: cli_test.py --tbecheck PATH --source DIR --work DIR TEST
Each TEST runs in a fresh DIR/TEST; exit 0 pass, 1 fail, 77 skip (gpu: no GPU here).
"""

import argparse
import html.parser
import os
import pty
import random
import re
import resource
import shlex
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77
TB = SRC = CUDA = None
# Several tbecheck processes run at once here (and ctest runs tests side by side): libgomp's
# default active spin-wait would make each many times slower on a 2-core CI machine.
ENV = dict(os.environ)
ENV.setdefault("OMP_WAIT_POLICY", "passive")


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def tb(*args, env=None, preexec=None, cwd=None, exe=None):
    """Runs tbecheck (or the copy exe) with args; returns (exit code, stdout, stderr)."""
    r = subprocess.run([exe or TB, *args], capture_output=True, text=True, env=env or ENV,
                       preexec_fn=preexec, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def expect(code, *args, **kw):
    rc, out, err = tb(*args, **kw)
    check(rc == code, f"tbecheck {' '.join(args)}: exit {rc}, expected {code}\n{out}\n{err}")
    return out, err


def case_file(name, lines):
    with open(name, "w") as f:
        f.write("\n".join(lines) + "\n")
    return name


def smoke():
    return os.path.join(SRC, "cases", "smoke.cases")


def edge():
    return os.path.join(SRC, "cases", "edge.cases")


def query(db, sql, params=()):
    with sqlite3.connect(db) as c:
        return c.execute(sql, params).fetchall()


def scalar(db, sql, params=()):
    return query(db, sql, params)[0][0]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def db_bytes(path):
    """A database's stored bytes: the file and what its WAL holds (a reader leaves it empty)."""
    wal = path + "-wal"
    return read_bytes(path), read_bytes(wal) if os.path.exists(wal) else b""


def rows_per_case(db, run):
    """{canonical: sorted list of (engine, baseline, output, status)} of one run."""
    out = {}
    for canon, *row in query(db, "SELECT c.canonical, r.engine, r.baseline, r.output, r.status "
                                 "FROM results r JOIN cases c ON c.id = r.case_id "
                                 "WHERE r.run = ?", (run,)):
        out.setdefault(canon, []).append(tuple(row))
    return {k: sorted(v) for k, v in out.items()}


# ---- the tests ----

def test_usage():
    expect(2)
    expect(0, "help")
    expect(2, "bogus")
    for cmd in ("run", "replay", "list", "show", "report", "import", "export", "merge",
                "random"):
        out, _ = expect(0, cmd, "--help")
        check(out.startswith(f"usage: tbecheck {cmd}"), f"{cmd} --help: {out[:80]}")
    for args, words in ((["run", "--bogus", "B=4"], "unknown option"),
                        (["run", "--repeat", "0", "B=4"], "bad value"),
                        (["run", "--repeat", "x", "B=4"], "bad value"),
                        (["run", "--shard", "3/2", "B=4"], "bad value"),
                        (["run", "--shard", "1/0", "B=4"], "bad value"),
                        (["run", "--engines", "ref,bogus", "B=4"], "unknown engine 'bogus'"),
                        (["run", "--inject-fault", "nope", "B=4"], "ENGINE:OUTPUT"),
                        (["run", "B=4", "--db"], "missing the value"),
                        (["run"], "at least one"),
                        (["list", "extra"], "usage"),
                        (["list", "--shard", "1/2"], "unknown option"),
                        (["show", "abc"], "usage"),
                        (["random", "3"], "usage")):
        _, err = expect(2, *args)
        check(words in err, f"{args}: '{words}' not in: {err}")
    check(not os.path.exists("tbecheck.db"), "bad usage created a database")


def test_bad_input():
    for args, words in ((["run", "T=x"], "key 'T'"),
                        (["run", "no-such.cases"], "no-such.cases"),
                        (["run", "."], "."),
                        (["replay", "T=x"], "key 'T'"),
                        (["run", "B=4 psw=0.5"], "(key 'psw'): psw fixes every per-sample "
                                                 "weight, so it needs weighted=1"),
                        (["replay", "weighted=1 psw=nan"], "(key 'psw'): psw=nan: expected"),
                        (["run", "opt=sgd bwd.hoist=yes"],
                         "(key 'bwd.hoist'): bwd.hoist=yes: expected off|on"),
                        (["run", "bwd.hoist=on"], "(key 'bwd.hoist'): bwd.hoist configures the "
                                                  "backward"),
                        (["export", "B=-1", "out"], "B"),
                        (["import", "no-such-dir"], "not a directory")):
        _, err = expect(2, *args)
        check(words in err, f"{args}: '{words}' not in: {err}")
    bad = case_file("bad.cases", ["B=4 L=2  # fine", "B=5", "B=6 Q=1  # unknown key", "B=7"])
    _, err = expect(2, "run", bad)
    check("bad.cases:3" in err and "Q" in err, f"the error does not name line 3 and key Q: {err}")
    check(not os.path.exists("tbecheck.db"), "bad input created a database")
    expect(0, "run", "--engines", "ref", "B=4 L=2")
    expect(2, "run", "--engines", "ref", "B=4", bad)
    check(scalar("tbecheck.db", "SELECT count(*) FROM runs") == 1,
          "a run with bad input was recorded")
    os.makedirs("capture")
    _, err = expect(2, "import", "capture")
    check("weights.npy is missing" in err, err)
    # a table without rows (E = 0): a repair to row 0 would read past it
    expect(0, "export", "T=2 B=2 E=5,6 D=4 L=2", "empty")
    write_npy(os.path.join("empty", "E.npy"), "<i8", (2,), struct.pack("<2q", 5, 0))
    _, err = expect(2, "import", "empty", "--engines", "ref")
    check("E[1] is 0" in err, err)
    _, err = expect(2, "replay", "99")
    check("no case with id or hash '99'" in err, err)


def bad_databases(good):
    """Files that are not usable tbecheck databases: {name: (path, words of the error)}."""
    data = read_bytes(good)
    made = {}
    with open("text.db", "w") as f:
        f.write("name,value\nthis is a text file\n")
    made["text"] = ("text.db", "not a SQLite database")
    with open("truncated.db", "wb") as f:
        f.write(data[:len(data) // 2])
    made["truncated"] = ("truncated.db", "corrupt")
    shutil.copy(good, "newer.db")
    with sqlite3.connect("newer.db") as c:
        c.execute("PRAGMA journal_mode = DELETE")
        c.execute("UPDATE meta SET schema_version = schema_version + 1")
    made["newer"] = ("newer.db", "newer than this tbecheck")
    with sqlite3.connect("foreign.db") as c:
        c.execute("CREATE TABLE t (x)")
    made["foreign"] = ("foreign.db", "not a tbecheck one")
    return made


def test_bad_db():
    expect(0, "run", "--db", "good.db", "--engines", "ref", "B=4 L=2", "B=8 L=3 pool=mean")
    with sqlite3.connect("good.db") as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    check(len(read_bytes("good.db")) >= 8 * 4096, "the good database is too small to truncate")
    for name, (path, words) in bad_databases("good.db").items():
        before = read_bytes(path)
        for args in (["run", "--engines", "ref", "--db", path, "B=4"], ["list", "--db", path],
                     ["report", "--db", path], ["show", "1", "--db", path],
                     ["replay", "1", "--db", path], ["merge", path, "good.db"],
                     ["merge", "out.db", path]):
            _, err = expect(2, *args)
            check(words in err and path in err, f"{name}: {args}: '{words}' not in: {err}")
            check(read_bytes(path) == before, f"{name}: {args} changed {path}")
            for side in ("-wal", "-shm", "-journal"):
                check(not os.path.exists(path + side), f"{name}: {args} created {path}{side}")


def test_kill():
    cases = case_file("many.cases", expect(0, "random", "100", "5")[0].splitlines())
    expect(0, "run", "--db", "full.db", "--engines", "ref", cases)
    for attempt in range(5):
        if os.path.exists("k.db"):
            os.remove("k.db")
        p = subprocess.Popen([TB, "run", "--db", "k.db", "--engines", "ref", "--repeat", "40",
                              cases], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
        committed = 0
        deadline = time.time() + 30
        while p.poll() is None and time.time() < deadline:
            try:
                committed = scalar("file:k.db?mode=ro", "SELECT count(*) FROM perf")
            except sqlite3.Error:
                committed = 0
            if committed:
                break
            time.sleep(0.002)
        time.sleep(random.uniform(0, 0.05))
        if p.poll() is not None:
            continue  # it finished before the kill: try again
        p.send_signal(signal.SIGKILL)
        p.wait()
        break
    else:
        raise Failed("the run always finished before it could be killed")
    check(scalar("k.db", "PRAGMA integrity_check") == "ok", "integrity_check failed")
    complete, ended = query("k.db", "SELECT complete, ended FROM runs")[0]
    check(complete == 0 and ended is None, "the killed run is not shown as incomplete")
    full = rows_per_case("full.db", 1)
    got = query("k.db", "SELECT c.canonical, r.repeat, count(*) FROM results r "
                        "JOIN cases c ON c.id = r.case_id GROUP BY r.case_id, r.repeat")
    check(got, "nothing was committed before the kill")
    for canon, repeat, n in got:
        check(n == len(full[canon]), f"case '{canon}' repeat {repeat}: {n} rows of "
                                      f"{len(full[canon])}: a case was stored in part")
    stored = len(got)
    expect(0, "run", "--db", "k.db", "--engines", "ref", "B=4 L=2")
    out, _ = expect(0, "report", "--db", "k.db", "--run", "1")
    check("complete           0" in out, f"report does not show run 1 incomplete:\n{out}")
    print(f"killed after {stored} case runs were committed; integrity ok")


def test_concurrent():
    """Several runs writing one new database at once lose nothing and corrupt nothing."""
    sets = [smoke(), edge(), smoke()]
    procs = [subprocess.Popen([TB, "run", "--db", "c.db", "--engines", "ref", s],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
             for s in sets]
    outs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outs):
        check(p.returncode == 0, f"a concurrent run failed ({p.returncode}): {err}")
    check(scalar("c.db", "PRAGMA integrity_check") == "ok", "integrity_check failed")
    check(scalar("c.db", "SELECT count(*) FROM runs WHERE complete = 1") == 3, "runs lost")
    for i, s in enumerate(sets):
        expect(0, "run", "--db", f"alone{i}.db", "--engines", "ref", s)
    runs = {r: rows_per_case("c.db", r) for (r,) in query("c.db", "SELECT id FROM runs")}
    alone = [rows_per_case(f"alone{i}.db", 1) for i in range(3)]
    for want in alone:
        check(any(got == want for got in runs.values()), "a run's results differ from alone")
    total = sum(sum(len(v) for v in a.values()) for a in alone)
    check(scalar("c.db", "SELECT count(*) FROM results") == total, "results lost")
    # the moment of creation, many times: each of six runs may be the one that makes the schema,
    # switches the file to WAL, or judges a file another is making
    for rnd in range(15):
        procs = [subprocess.Popen([TB, "run", "--db", f"n{rnd}.db", "--engines", "ref", "B=4"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=ENV) for _ in range(6)]
        for p in procs:
            err = p.communicate()[1]
            check(p.returncode == 0, f"round {rnd}: a run creating the database failed "
                                     f"({p.returncode}): {err}")
        check(scalar(f"n{rnd}.db", "SELECT count(*) FROM runs WHERE complete = 1") == 6,
              f"round {rnd}: runs lost")


def limit_file_size(n):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))


def test_full_disk():
    expect(0, "run", "--db", "f.db", "--engines", "ref", smoke())
    limit = 128 * 1024  # one run of the smoke cases fits (about 100 KiB), 20 repeats do not
    size = len(read_bytes("f.db"))
    check(size < limit, f"the database ({size} bytes) is already past the limit")
    _, err = expect(3, "run", "--db", "f.db", "--engines", "ref", "--repeat", "20", smoke(),
                    preexec=limit_file_size(limit))
    check("cannot store case" in err and ("full" in err or "I/O" in err or "large" in err),
          f"unclear full-disk error: {err}")
    check("stays incomplete" in err, f"the error does not say the run is incomplete: {err}")
    check(scalar("f.db", "PRAGMA integrity_check") == "ok", "integrity_check failed")
    check(query("f.db", "SELECT id, complete FROM runs ORDER BY id") == [(1, 1), (2, 0)],
          "run states after a full disk")
    want = rows_per_case("f.db", 1)
    for canon, repeat, n in query("f.db", "SELECT c.canonical, r.repeat, count(*) FROM results r"
                                          " JOIN cases c ON c.id = r.case_id WHERE r.run = 2 "
                                          "GROUP BY r.case_id, r.repeat"):
        check(n == len(want[canon]), f"'{canon}' repeat {repeat} stored in part on a full disk")
    # a new database on a full disk: an error, and nothing left that a later run would refuse
    _, err = expect(3, "run", "--db", "new.db", "--engines", "ref", "B=4",
                    preexec=limit_file_size(2048))
    expect(0, "run", "--db", "new.db", "--engines", "ref", "B=4")


def test_fault():
    """Test the tester: a one-ulp fault must fail, be listed, shown and replayed at its place."""
    case = "T=2 B=4 E=10,10 D=4,8 L=1"
    expect(0, "run", "--engines", "ref", case)
    # the output is [B, total_D = 4 + 8]: element 17 is sample 1, feature 1 (columns 4..), d 1
    out, _ = expect(1, "run", "--engines", "ref", "--inject-fault", "ref:output@17", case)
    check("FAIL" in out and "t=1 b=1 d=1" in out, f"the fault is not reported there:\n{out}")
    out, _ = expect(0, "list", "--failed")
    check(out.count("fail") == 1, f"list --failed:\n{out}")
    rid = scalar("tbecheck.db", "SELECT id FROM results WHERE status = 'fail'")
    out, _ = expect(0, "show", str(rid))
    check("t=1 b=1 d=1" in out and "violations recorded: 1" in out, f"show:\n{out}")
    expect(2, "show", "999")
    out, _ = expect(1, "replay", "--engines", "ref", "--inject-fault", "ref:output@17", "1")
    check("t=1 b=1 d=1" in out, f"replay does not show the violation:\n{out}")
    expect(0, "replay", "--engines", "ref", "1")
    out, _ = expect(0, "report")
    check("1 bits" in out or "1 status" in out, f"report does not show the change:\n{out}")


def test_queries():
    """Every query of reports/queries/ on a database built here: through Python's sqlite3 and,
    where it is installed, the sqlite3 shell with .parameter as README.md shows."""
    cases = case_file("q.cases", ["B=4 L=1 D=4", "T=2 B=3 E=10,20 D=4,8 L=2 weighted=1",
                                  "B=8 L=3 invalid=0.5 bounds=fatal"])
    expect(0, "run", "--engines", "ref", cases)
    expect(1, "run", "--engines", "ref", "--inject-fault", "ref:output", "--repeat", "2", cases)
    qdir = os.path.join(SRC, "reports", "queries")
    names = sorted(f[:-4] for f in os.listdir(qdir) if f.endswith(".sql"))
    check(names == ["campaign", "case_drift", "commit_changes", "commit_drift", "commits",
                    "drift", "failures", "flaky", "perf_drift", "races", "ratios", "result",
                    "run", "summary", "violations", "worst"],
          f"queries: {names}: give the new one a test")
    fail_id = scalar("tbecheck.db", "SELECT min(id) FROM results WHERE status = 'fail'")
    with sqlite3.connect("tbecheck.db") as c:
        c.execute("UPDATE runs SET dirty = 0, git_commit = ?", ("a" * 40,))
    params = {"case_drift": {"case": 1, "injected": 1}, "drift": {"run": 2}, "failures": {},
              "flaky": {}, "result": {"id": fail_id}, "run": {}, "summary": {"run": 1},
              "violations": {"id": fail_id}, "worst": {}, "campaign": {}, "commits": {},
              "commit_drift": {}, "commit_changes": {}, "perf_drift": {}, "ratios": {},
              "races": {}}
    got = {}
    for n in names:
        with open(os.path.join(qdir, n + ".sql")) as f:
            sql = f.read()
        c = sqlite3.connect("tbecheck.db")
        cur = c.execute(sql, {"run": None, "all": None, "case": None, "id": None,
                              "injected": None, "campaign": None, "since": None, **params[n]})
        got[n] = ([d[0] for d in cur.description], cur.fetchall())
        c.close()
    col = lambda n, name: [r[got[n][0].index(name)] for r in got[n][1]]
    per_path = list(zip(col("summary", "path"), col("summary", "cases"),
                        col("summary", "unsupported")))
    check(per_path == [("bounds", 1, 1), ("forward", 2, 0)] and
          set(col("summary", "pair")) == {"ref:exact"},
          f"summary (the FATAL case has no forward, only its outcome): {got['summary']}")
    check(set(col("failures", "status")) == {"fail"} and len(got["failures"][1]) == 4,
          f"failures of the last run: {got['failures']}")
    check(col("case_drift", "run") == [1, 2, 2], f"case_drift: {got['case_drift']}")
    changes = sorted(zip(col("drift", "repeat"), col("drift", "change")))
    check(changes == [(0, "same"), (0, "status"), (0, "status"), (1, "same"), (1, "same"),
                      (1, "same")],
          f"drift of run 2 (each case failed, then repeated the same bits; the FATAL case "
          f"stays unsupported): {got['drift']}")
    check(got["flaky"][1] == [], f"flaky counts the injected run 2: {got['flaky']}")
    check(col("run", "run") == [2] and col("run", "complete") == [1], f"run: {got['run']}")
    check(col("result", "status") == ["fail"], f"result: {got['result']}")
    check(len(got["violations"][1]) == 1, f"violations: {got['violations']}")
    check(got["races"][1] == [], f"races of a run that raced nothing: {got['races']}")
    check(col("worst", "rank") == [1, 2] and "inf" not in str(col("worst", "worst_ratio")),
          f"worst (the injected run 2 left out): {got['worst']}")
    if not shutil.which("sqlite3"):
        print("sqlite3 shell not installed: the README examples were not run through it")
        return
    shell = dict(params, flaky={"injected": 1})  # by default flaky.sql is empty here
    for n, p in shell.items():
        cmds = [f".parameter set :{k} {v}" for k, v in p.items()]
        r = subprocess.run(["sqlite3", "-header", "-column", "tbecheck.db", *cmds,
                            f".read {os.path.join(qdir, n + '.sql')}"],
                           capture_output=True, text=True)
        check(r.returncode == 0 and not r.stderr and (r.stdout.strip() or n in ("perf_drift", "races")),
              f"sqlite3 shell, {n}: {r.returncode} {r.stderr}{r.stdout}")  # no bench, no race here


def test_merge():
    expect(0, "run", "--db", "all.db", "--engines", "ref", smoke())
    out1, _ = expect(0, "run", "--db", "s1.db", "--engines", "ref", "--shard", "1/2", smoke())
    out2, _ = expect(0, "run", "--db", "s2.db", "--engines", "ref", "--shard", "2/2", smoke())
    out, _ = expect(0, "merge", "m.db", "s1.db", "s2.db")
    check(out.count("1 run added") == 2, out)
    out, _ = expect(0, "merge", "m.db", "s1.db")
    check("0 runs added" in out, f"merging again added runs: {out}")
    digests = "SELECT c.canonical, r.engine, r.baseline, r.output, r.status, r.digest " \
              "FROM results r JOIN cases c ON c.id = r.case_id ORDER BY 1, 2, 3, 4"
    check(query("m.db", digests) == query("all.db", digests),
          "the merged shards differ from one run of all the cases")
    check(scalar("m.db", "SELECT group_concat(shard) FROM runs") == "1/2,2/2", "shards")
    check(scalar("m.db", "PRAGMA integrity_check") == "ok", "integrity_check failed")


def test_import():
    expect(0, "export", "T=2 B=5 E=40,50 D=4,8 L=3 weighted=1 invalid=0.2", "cap")
    out, _ = expect(0, "import", "cap", "--engines", "ref")
    out, _ = expect(0, "import", "cap", "--engines", "ref")
    rows = query("tbecheck.db", "SELECT id, canonical FROM cases")
    check(len(rows) == 1 and rows[0][1].startswith("import digest=") and
          "bounds=warning" in rows[0][1], f"cases: {rows}")
    check(scalar("tbecheck.db", "SELECT count(*) FROM runs") == 2, "two imports, two runs")
    _, err = expect(2, "replay", str(rows[0][0]))
    check("imported batch" in err, err)
    _, err = expect(2, "import", "cap", "--pool", "mean")
    check("MEAN" in err, err)
    expect(2, "import", "cap", "--pool", "max")
    # Inf and NaN weights are valid: the exact value is their IEEE sum, matched, not bounded
    # (a NaN bound once failed the violations insert: exit 3, an incomplete run)
    for name, row, want in (("inf", (0x7C00, 0x3C00), "pass"), ("nan", (0x7E00, 0x3C00), "pass")):
        expect(0, "export", "E=1 D=2 B=1 L=1 wdtype=fp16", name)
        write_npy(os.path.join(name, "weights.npy"), "<f2", (2,), struct.pack("<2H", *row))
        expect(0, "import", name, "--engines", "ref")
        rows = query("tbecheck.db", "SELECT DISTINCT status FROM results WHERE run = "
                                    "(SELECT max(id) FROM runs)")
        check(rows == [(want,)], f"{name}: {rows}")


def test_replay():
    expect(0, "run", "--engines", "ref", "--repeat", "3", "B=4 L=2 seed=3")
    h = scalar("tbecheck.db", "SELECT hash FROM cases")
    for key in ("1", h, "L=2 seed=3"):
        out, _ = expect(0, "replay", "--engines", "ref", key)
        check("ref:exact" in out and "L=2 seed=3" in out, f"replay {key}:\n{out}")
    # --result takes list's first column, a result id; a bare number stays a case id
    expect(0, "run", "--engines", "ref", "B=5 L=1 seed=4")
    rid, cid = query("tbecheck.db", "SELECT id, case_id FROM results ORDER BY id DESC LIMIT 1")[0]
    check(rid > 2 and cid == 2, f"result {rid} of case {cid}: the test needs them apart")
    listed, _ = expect(0, "list")
    check(any(l.split()[:1] == [str(rid)] and l.split()[2] == "2" for l in listed.splitlines()),
          f"list does not print result {rid} beside its case 2:\n{listed}")
    out, _ = expect(0, "replay", "--engines", "ref", "--result", str(rid))
    check("L=1 seed=4" in out and "B=5" in out, f"replay --result {rid}:\n{out}")
    _, err = expect(2, "replay", "--engines", "ref", str(rid))
    check(f"no case with id or hash '{rid}'" in err and "--result" in err, err)
    _, err = expect(2, "replay", "--result", "99999")
    check("tbecheck.db has no result 99999" in err, err)
    _, err = expect(2, "replay", "--result", str(rid), "B=4")
    check("give no case or id beside it" in err, err)


def test_oracle_skip():
    env = dict(ENV, TBECHECK_PYTHON="/nonexistent/python3")
    out, _ = expect(0, "run", "--engines", "ref,oracle", smoke(), env=env)
    check("engine oracle: skip (cannot start" in out, out)
    check("warning: engine oracle did not run (cannot start" in out.split("ref:exact")[-1],
          f"no warning after the summary:\n{out}")
    rows = query("tbecheck.db", "SELECT DISTINCT status, reason IS NOT NULL FROM results "
                                "WHERE engine = 'oracle'")
    check(rows == [("skip", 1)], f"oracle rows without the oracle: {rows}")


def test_live():
    """On a terminal: one progress line, redrawn (done/total, failures, rate, ETA)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([TB, "run", "--engines", "ref", smoke()], stdout=slave,
                         stderr=subprocess.PIPE, env=ENV)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    p.wait()
    os.close(master)
    out = b"".join(chunks).decode()
    check(p.returncode == 0, f"exit {p.returncode}")
    with open(smoke()) as f:
        n = sum(1 for line in f if line.split("#")[0].strip())
    check("\r\x1b[K[" in out and "cases/s, ETA" in out and f"[{n}/{n}]" in out,
          f"no progress line:\n{out[:400]!r}")
    check("pass  case" not in out, "plain per-case lines on a terminal")
    check("ref:exact" in out, "no summary on a terminal")


def test_gpu():
    out, _ = expect(0, "run", "--db", "probe.db", "--engines", "gpu", "B=1 seed=1")
    if "engine gpu: skip" in out:
        print(out.splitlines()[0])
        return SKIP
    cases = [os.path.join(SRC, "cases", f) for f in ("gpu_backward.cases", "gpu.cases")]
    out, _ = expect(0, "run", "--engines", "gpu", smoke(), edge(), *cases)
    # every output the reference has, the GPU has too, and each one passes
    bad = scalar("tbecheck.db", "SELECT group_concat(output || ':' || status, ' ') FROM results "
                                "WHERE engine = 'gpu' AND status != 'pass'")
    check(bad is None, f"gpu results that did not pass: {bad}")
    for path in ("backward", "backward.atomic"):
        check(scalar("tbecheck.db", "SELECT count(*) FROM results WHERE engine = 'gpu' "
                                    f"AND path = '{path}' AND status = 'pass'") > 0,
              f"no gpu result on path {path} passed")


# ---- issue 12: what broke when tbecheck was tried as a new user would ----

def runs_in(db):
    return scalar(db, "SELECT count(*) FROM runs") if os.path.exists(db) else 0


def test_fault_nowhere():
    """A fault that lands nowhere tests nothing: bad usage, exit 2, naming why."""
    case = "B=4 D=64"  # output [4, 64]: 256 elements
    out, _ = expect(1, "run", "--engines", "ref", "--inject-fault", "ref:output@255", case)
    before = db_bytes("tbecheck.db")
    # refused at the run's end (only then is it known where the fault landed): nothing stored
    _, err = expect(2, "run", "--engines", "ref", "--inject-fault", "ref:output@999999", "B=4")
    check("nothing was stored" in err, err)
    check(db_bytes("tbecheck.db") == before, "a refused injected run changed the database")
    _, err = expect(2, "run", "--engines", "ref", "--db", "new.db", "--inject-fault",
                    "ref:weights", "B=4")  # a forward-only case: no weights
    check("produced no 'weights'" in err and not os.path.exists("new.db"),
          f"a refused run left {os.listdir('.')}: {err}")
    for args, words in ((["ref:output@256"], "at most 256 elements"),
                        (["ref:output@999999999"], "at most 256 elements"),
                        (["oracle:nosuchoutput"], "has no output 'nosuchoutput'"),
                        (["ref:psw_grad"], "produced no 'psw_grad'"),
                        (["oracle:output", "--engines", "ref"], "not among --engines")):
        _, err = expect(2, "run", "--engines", "ref", "--inject-fault", *args, case)
        check(words in err, f"--inject-fault {args}: '{words}' not in: {err}")
    _, err = expect(2, "run", "--engines", "ref,gpu", "--inject-fault", "gpu:output", case,
                    env=dict(ENV, CUDA_VISIBLE_DEVICES=""))
    check("engine gpu does not run here" in err, err)
    _, err = expect(2, "run", "--engines", "ref", "--inject-fault", "ref:output",
                    "B=8 invalid=0.5 bounds=fatal")
    check("produced no 'output'" in err, err)
    _, err = expect(2, "replay", "--engines", "ref", "--inject-fault", "ref:output@256", case)
    check("landed nowhere" in err, err)
    check(runs_in("tbecheck.db") == 1 and db_bytes("tbecheck.db") == before,
          "a refused fault recorded a run")


def test_injected():
    """A fault-injected run is marked, and kept out of drift, flaky and worst."""
    expect(0, "export", "B=4 L=2 D=8", "ex")
    expect(1, "import", "ex", "--db", "imp.db", "--engines", "ref", "--inject-fault", "ref:output")
    check(query("imp.db", "SELECT injected FROM runs") == [(1,)], "an injected import unmarked")
    cases = case_file("i.cases", ["B=4 L=2 D=8", "T=2 B=3 E=10,20 D=4,8 L=2"])
    expect(0, "run", "--engines", "ref", cases)
    expect(1, "run", "--engines", "ref", "--inject-fault", "ref:output", cases)
    expect(0, "run", "--engines", "ref", cases)
    check(query("tbecheck.db", "SELECT injected FROM runs ORDER BY id") == [(0,), (1,), (0,)],
          "runs.injected")
    with sqlite3.connect("tbecheck.db") as c:  # one clean commit, so runs count as the same code
        c.execute("UPDATE runs SET dirty = 0, git_commit = ?", ("a" * 40,))
    out, _ = expect(0, "report")
    check("0 changed" in out, f"the clean run 3 shows changes against the injected run 2:\n{out}")
    out, _ = expect(0, "report", "--run", "2")
    check("2 changed (2 status" in out, f"the injected run 2 lost its own drift:\n{out}")
    qdir = os.path.join(SRC, "reports", "queries")
    for name, rows_default in (("flaky", 0), ("worst", 2)):
        with open(os.path.join(qdir, name + ".sql")) as f:
            sql = f.read()
        got = query("tbecheck.db", sql, {"injected": None})
        check(len(got) == rows_default and "inf" not in str(got).lower(),
              f"{name}.sql counts the injected run: {got}")
        check(query("tbecheck.db", sql, {"injected": 1}) != got,
              f"{name}.sql with :injected = 1 does not show the injected run")
    # a database of schema 1 (before runs.injected, and schema 3's campaign, bench and perf
    # columns) is upgraded by the next writer, step by step
    shutil.copy("tbecheck.db", "old.db")
    with sqlite3.connect("old.db") as c:
        for view in ("result_history", "last_run", "run_code"):
            c.execute(f"DROP VIEW {view}")
        c.execute("DROP TABLE races")
        for table, column in (("runs", "gpu_uuid"), ("runs", "engine_versions"), ("runs", "bench"),
                              ("runs", "campaign"), ("runs", "injected"),
                              ("perf", "shape"), ("perf", "config"), ("perf", "ceiling_gbps")):
            c.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        c.execute("UPDATE meta SET schema_version = 1")
    with sqlite3.connect("old.db") as c:  # version 1's results took no 'model', no 'ext.NAME'
        c.execute("PRAGMA writable_schema = ON")
        c.execute("UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = 'results'",
                  ("'ref', 'model', 'exact'", "'ref', 'exact'"))
        c.execute("UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = 'results'",
                  old_engine_check())
    _, err = expect(2, "list", "--db", "old.db")
    check("older than this tbecheck" in err and "upgrades it" in err, err)
    expect(0, "run", "--db", "old.db", "--engines", "ref", "B=4 L=2 D=8")
    check(scalar("old.db", "SELECT schema_version FROM meta") == 6, "not upgraded")
    check("'model'" in scalar("old.db", "SELECT sql FROM sqlite_master WHERE name = 'results'"),
          "results.baseline still refuses the model baseline")
    check("'ext.?*'" in scalar("old.db", "SELECT sql FROM sqlite_master WHERE name = 'results'"),
          "results.engine still refuses external engines")
    check(scalar("old.db", "PRAGMA integrity_check") == "ok", "the upgrade broke the database")
    check(query("old.db", "SELECT injected FROM runs ORDER BY id") == [(0,), (1,), (0,), (0,)],
          "the upgrade did not mark the injected run from its arguments")
    expect(0, "merge", "m.db", "old.db")
    expect(0, "report", "--db", "m.db")


def test_fuzz_fault():
    """fuzz --inject-fault tests the tester only where the fault lands: one aimed at an engine
    that does not run (or is not asked for) is refused before anything is written, one that no
    drawn case reached fails the campaign (exit 2), and a campaign that injects is marked
    injected and prints reproducers that carry the fault. Bad values name their option; a
    campaign that ran no case warns."""
    nogpu = dict(ENV, CUDA_VISIBLE_DEVICES="")
    for args, words in ((["gpu:output"], "engine gpu does not run here"),
                        (["oracle:output", "--engines", "ref"], "not among --engines")):
        _, err = expect(2, "fuzz", "--seconds", "2", "--db", "f.db", "--inject-fault", *args,
                        env=nogpu)
        check(words in err, f"fuzz --inject-fault {args}: '{words}' not in: {err}")
        check(not os.path.exists("f.db"), f"fuzz --inject-fault {args} wrote f.db before refusing")
    _, err = expect(2, "fuzz", "--seconds", "3", "--engines", "ref", "--db", "far.db",
                    "--inject-fault", "ref:output@99999999")
    check("landed nowhere" in err and "nothing was stored" in err and
          not os.path.exists("far.db"), f"a fault past every drawn case's output: {err}")
    expect(0, "run", "--db", "far.db", "--engines", "ref", "B=4")
    before = db_bytes("far.db")
    expect(2, "fuzz", "--seconds", "2", "--engines", "ref", "--db", "far.db",
           "--inject-fault", "ref:output@99999999")
    check(db_bytes("far.db") == before, "a refused fuzz campaign changed the database")
    out, _ = expect(1, "fuzz", "--seconds", "3", "--engines", "ref", "--db", "f.db",
                    "--inject-fault", "ref:output")
    check(query("f.db", "SELECT injected FROM runs") == [(1,)], "the fuzz run is not injected")
    repro = [ln for ln in out.splitlines() if "reproduce: tbecheck replay" in ln]
    check(repro and all("--inject-fault ref:output@0" in ln for ln in repro),
          f"a reproducer without its fault (it would pass):\n{out}")
    expect(0, "run", "--db", "f.db", "--engines", "ref", "B=1 E=1 D=1 L=0 seed=0")
    check(query("f.db", "SELECT injected FROM runs ORDER BY id") == [(1,), (0,)], "runs.injected")
    for args, words in ((["--seconds", "0"], "bad value '0' for --seconds"),
                        (["--max-cases", "x"], "bad value 'x' for --max-cases")):
        _, err = expect(2, "fuzz", "--db", "b.db", *args)
        check(words in err, f"fuzz {args}: '{words}' not in: {err}")
    out, _ = expect(0, "fuzz", "--seconds", "2", "--max-cases", "0", "--engines", "ref",
                    "--db", "z.db")
    check("warning: no case ran" in out, f"an empty campaign gave no warning:\n{out}")


def test_merge_refused():
    """merge checks every input before it writes: a bad input (not a database, or missing)
    refuses the whole merge with exit 2, creates no output and leaves an existing one as it
    was."""
    expect(0, "run", "--db", "good.db", "--engines", "ref", "B=4 seed=1")
    with open("notsqlite.db", "w") as f:
        f.write("this is not a database\n" * 10)
    out, err = expect(2, "merge", "out.db", "good.db", "notsqlite.db")
    check("added" not in out, f"merge printed progress before refusing:\n{out}")
    check(not os.path.exists("out.db"), "a refused merge created out.db")
    expect(2, "merge", "new.db", "missing.db")
    check(not os.path.exists("new.db"), "a merge of a missing database left new.db behind")
    expect(0, "merge", "kept.db", "good.db")
    before = read_bytes("kept.db")
    expect(0, "run", "--db", "other.db", "--engines", "ref", "B=4 seed=2")
    expect(2, "merge", "kept.db", "other.db", "missing.db")
    check(read_bytes("kept.db") == before, "a refused merge changed the existing output")


def old_engine_check():
    """(new, old): results.engine's CHECK as schema.sql has it, and before schema 6."""
    return ("engine IN ('ref', 'gpu', 'oracle') OR (engine GLOB 'ext.?*' AND engine NOT GLOB "
            "'ext.*[^a-z0-9_]*')", "engine IN ('ref', 'gpu', 'oracle')")


EXT_ENGINE = """
import sys
sys.path.insert(0, {oracle!r})
import numpy as np
import tbe_oracle
ORDER = {order!r}
MODE = {mode!r}
VIEW = {{"fp32": "<f4", "fp16": "<f2", "bf16": "<u2"}}


def version():
    return "the NumPy oracle as an external engine, " + MODE


def fp32_forward(m, a, res):
    # FBGEMM CPU's order on fp32 weights: an fp32 sum in position order (SUM, unweighted)
    E, D, toff = a["E"], a["D"], a["table_offset"]
    out = np.zeros(m["out_elems"], np.float32)
    offs, idx, ftm = res.offsets, res.indices, a["feature_table_map"]
    B = m["B"]
    for g in range(m["total_B"]):
        t, b = divmod(g, B)
        j = ftm[t]
        W = a["weights"][toff[j]:toff[j] + E[j] * D[j]].reshape(E[j], D[j])
        acc = np.zeros(D[j], np.float32)
        for p in range(offs[g], offs[g + 1]):
            acc = acc + W[idx[p]]
        out[b * D.sum() + D[ftm[:t]].sum() + np.arange(D[j])] = acc
    return out


def run(case):
    m = case.manifest
    if m["T"] == 3:
        raise NotImplementedError("three features are not for this engine")
    if MODE == "crash" and m["B"] == 7:  # the engine's process dies on this case
        import os, signal
        os.kill(os.getpid(), signal.SIGSEGV)
    a = tbe_oracle.load_case(case.dir)[1]
    if MODE == "pruned_row0":  # a defect: a pruned row (-1) read as row 0
        a["indices"] = np.where(a["indices"] == -1, 0, a["indices"]).astype(a["indices"].dtype)
    res = tbe_oracle.run_case(m, a)
    got = {{"indices": res.indices, "offsets": res.offsets, "warnings": res.warnings}}
    if MODE == "decline":
        got["declined"] = {{"warnings": "it counts bad bags its own way"}}
    if MODE == "raises":
        got["raised"] = {{"warnings": "it threw on a valid counter"}}
    if MODE in ("decline", "omit", "raises"):
        del got["warnings"]
    if res.offender is not None:
        o = res.offender
        got["offender"] = ((o["feature"], o["bag"], o["position"], o["value"])
                           if o["kind"] == "index" else (o["feature"], o["bag"]))
        return got
    bits = np.ascontiguousarray(res.output_bits).view(VIEW[m["out_dtype"]])
    if MODE == "widen":  # a wrong dtype: tbecheck must refuse to convert it
        bits = bits.astype(np.float64)
    if MODE in ("fp32", "fp64") and m["wdtype"] == "fp32":
        bits = fp32_forward(m, a, res) if MODE == "fp32" else bits
    got["output"] = bits
    return got
"""


def ext_engine(name, order="normative", mode="good"):
    os.makedirs("ext", exist_ok=True)
    with open(f"ext/tbecheck_ext_{name}.py", "w") as f:
        f.write(EXT_ENGINE.format(oracle=os.path.join(SRC, "ref", "oracle"), order=order,
                                  mode=mode))


def test_ext():
    """External engines (ext.NAME, harness/check/engine_ext.h): found as a Python module or an
    executable on PATH, held to the reference bit for bit where their order is the normative
    one and to their order's model and its bound elsewhere; what they cannot do is unsupported
    with their reason, a defect or a missing output is a failure, a wrong dtype an error."""
    if subprocess.run([os.environ.get("TBECHECK_PYTHON") or sys.executable, "-c",
                       "import numpy"]).returncode:
        print("SKIP: NumPy is not installed for the engines' Python")
        return SKIP
    for name, order, mode in (("good", "normative", "good"), ("pruned", "normative", "pruned_row0"),
                              ("decline", "normative", "decline"), ("omit", "normative", "omit"),
                              ("widen", "normative", "widen"), ("fp32", "fbgemm_cpu", "fp32"),
                              ("fp64", "fbgemm_cpu", "fp64"), ("odd", "sideways", "good"),
                              ("crash", "normative", "crash"), ("raises", "normative", "raises")):
        ext_engine(name, order, mode)
    env = dict(ENV, PYTHONPATH=os.path.abspath("ext"))
    cases = ["T=2 B=8 L=4 D=8", "T=2 B=8 L=6 D=8 invalid=0.2 invalid_kind=pruned bounds=warning",
             "T=2 B=8 L=4 D=8 bounds=fatal invalid=0.3", "T=2 B=8 L=5 D=4 wdtype=fp16 out=fp16",
             "T=3 B=4 L=2"]

    def statuses(db, engine):
        return dict(((c, o, bl), (st, why)) for c, o, bl, st, why in query(
            db, "SELECT c.canonical, r.output, r.baseline, r.status, r.reason FROM results r "
                "JOIN cases c ON c.id = r.case_id WHERE r.engine = ?", (engine,)))

    out, _ = expect(0, "run", "--db", "g.db", "--engines", "ref,ext.good", *cases, env=env)
    got = statuses("g.db", "ext.good")
    check(got and all(st in ("pass", "unsupported") for st, _ in got.values()), f"{got}")
    three = [why for (c, _, _), (st, why) in got.items() if c.startswith("T=3")]
    check(three and all("three features" in w for w in three), f"T=3 not unsupported: {three}")
    check(("T=2 B=8 D=8 invalid=0.3 bounds=fatal seed=1", "offender", "ref") in got,
          f"no offender compared: {sorted(got)}")
    check("ext.good:ref" in out, f"the summary has no ext.good pair:\n{out}")
    versions = scalar("g.db", "SELECT engine_versions FROM runs")
    check(versions == "ext.good: order normative, the NumPy oracle as an external engine, good",
          f"runs.engine_versions: {versions}")
    out, _ = expect(0, "report", "--db", "g.db", env=env)
    check("the NumPy oracle as an external engine" in out, f"report:\n{out[:1500]}")
    # a defect, found by the normative comparison
    _, err = expect(1, "run", "--db", "p.db", "--engines", "ref,ext.pruned", *cases, env=env)
    bad = [(c, o) for (c, o, _), (st, _) in statuses("p.db", "ext.pruned").items() if st == "fail"]
    check(bad and all("pruned" in c and o in ("indices", "output") for c, o in bad) and
          any(o == "output" for _, o in bad), f"pruned rows: {bad}")
    # a campaign finds it too, and its reproducer names the engines, so that replay fails alike
    out, _ = expect(1, "fuzz", "--seconds", "4", "--seed", "3", "--engines", "ref,ext.pruned",
                    "--db", "fz.db", env=env)
    repro = re.search(r"reproduce: tbecheck replay '([^']+)' --engines ref,ext\.pruned\n", out)
    check(repro, f"no reproducer naming the engines:\n{out[-2000:]}")
    expect(1, "replay", repro.group(1), "--engines", "ref,ext.pruned", env=env)
    # declined: unsupported with the reason; omitted: a failure; a wrong dtype: an error
    expect(0, "run", "--db", "d.db", "--engines", "ref,ext.decline", cases[0], env=env)
    st, why = statuses("d.db", "ext.decline")[("T=2 B=8 D=8 seed=1", "warnings", "ref")]
    check(st == "unsupported" and "its own way" in why, f"declined warnings: {st} {why}")
    expect(1, "run", "--db", "o.db", "--engines", "ref,ext.omit", cases[0], env=env)
    st, why = statuses("o.db", "ext.omit")[("T=2 B=8 D=8 seed=1", "warnings", "ref")]
    check(st == "fail" and "has no warnings" in why, f"omitted warnings: {st} {why}")
    expect(1, "run", "--db", "r.db", "--engines", "ref,ext.raises", cases[0], env=env)
    st, why = statuses("r.db", "ext.raises")[("T=2 B=8 D=8 seed=1", "warnings", "ref")]
    check(st == "fail" and "raised on valid input: it threw" in why, f"raised: {st} {why}")
    # an engine that dies loses that case only: a new worker takes the next
    expect(1, "run", "--db", "c.db", "--engines", "ref,ext.crash", cases[0], "T=2 B=7 L=3",
           cases[3], env=env)
    got = statuses("c.db", "ext.crash")
    died = {c for (c, _, _), (st, why) in got.items() if st == "error" and "signal 11" in why}
    check(died == {"T=2 B=7 L=3 seed=1"}, f"the crash: {died}")
    check(all(st == "pass" for (c, _, _), (st, _) in got.items() if "B=7" not in c),
          f"the cases around the crash: {got}")
    expect(1, "run", "--db", "w.db", "--engines", "ref,ext.widen", cases[0], env=env)
    check(any(st == "error" and "converts no floating value" in why
              for st, why in statuses("w.db", "ext.widen").values()), "float64 output accepted")
    # another order: its model bit for bit and the bound on fp32 weights, the reference's bits
    # on fp16 weights; a model that is not the engine's order fails
    expect(0, "run", "--db", "f.db", "--engines", "ref,ext.fp32", cases[0], cases[3], env=env)
    got = statuses("f.db", "ext.fp32")
    check(got[("T=2 B=8 D=8 seed=1", "output", "model")][0] == "pass" and
          got[("T=2 B=8 D=8 seed=1", "output", "exact")][0] == "pass" and
          ("T=2 B=8 D=8 seed=1", "output", "ref") not in got and
          got[("T=2 B=8 D=4 L=5 wdtype=fp16 out=fp16 seed=1", "output", "ref")][0] == "pass",
          f"fbgemm_cpu order: {got}")
    expect(1, "run", "--db", "f64.db", "--engines", "ref,ext.fp64", "T=2 B=8 L=40 D=64", env=env)
    got = statuses("f64.db", "ext.fp64")
    check(got[("T=2 B=8 L=40 seed=1", "output", "model")][0] == "fail" and
          got[("T=2 B=8 L=40 seed=1", "output", "exact")][0] == "pass",
          f"an fp64 sum held to the fp32 model: {got}")
    # the engine cannot run: a skip with the reason, never a pass
    out, _ = expect(0, "run", "--db", "s.db", "--engines", "ref,ext.odd,ext.missing", cases[0],
                    env=env)
    got = statuses("s.db", "ext.odd")
    check(all(st == "skip" and "no model of" in why for st, why in got.values()), f"{got}")
    got = statuses("s.db", "ext.missing")
    check(all(st == "skip" and "tbecheck_ext_missing" in why for st, why in got.values()),
          f"{got}")
    # an executable on PATH comes first, and speaks the protocol itself
    os.makedirs("bin")
    with open("bin/tbecheck-ext-exe", "w") as f:
        f.write("#!/bin/sh\necho 'ready order=normative version=a shell engine'\n"
                "while read d; do echo 'unsupported: it computes nothing'; done\n")
    os.chmod("bin/tbecheck-ext-exe", 0o755)
    path_env = dict(env, PATH=os.path.abspath("bin") + ":" + env.get("PATH", ""))
    expect(0, "run", "--db", "x.db", "--engines", "ref,ext.exe", cases[0], env=path_env)
    check(all(st == "unsupported" and why == "it computes nothing"
              for st, why in statuses("x.db", "ext.exe").values()), "the executable engine")
    # an engine that hangs on a case is killed at --engine-timeout: that case is its error, a
    # new worker takes the next case
    with open("bin/tbecheck-ext-hang", "w") as f:
        f.write("#!/bin/sh\necho 'ready order=normative version=hangs once'\n"
                "while read d; do [ -f hung ] || { touch hung; exec sleep 1000; }\n"
                "echo 'unsupported: it computes nothing'; done\n")
    os.chmod("bin/tbecheck-ext-hang", 0o755)
    t0 = time.time()
    out, _ = expect(1, "run", "--db", "h.db", "--engines", "ref,ext.hang", "--engine-timeout",
                    "1", "T=2 B=4 seed=1", "T=2 B=4 seed=2", env=path_env)
    got = statuses("h.db", "ext.hang")
    first = [v for k, v in got.items() if "seed=1" in k[0]]
    second = [v for k, v in got.items() if "seed=2" in k[0]]
    check(first and all(st == "error" and "within 1 s: killed" in why for st, why in first) and
          second and all(st == "unsupported" for st, _ in second) and time.time() - t0 < 60,
          f"a hung engine: {got} after {time.time() - t0:.0f} s")
    for bad in ("-1", "x", "604801"):
        _, err = expect(2, "run", "--engine-timeout", bad, cases[0], env=env)
        check("engine-timeout" in err, f"--engine-timeout {bad}: {err}")
    # test the tester through an external engine; names that are not engines
    expect(1, "run", "--db", "i.db", "--engines", "ref,ext.good", "--inject-fault",
           "ext.good:output@3", cases[0], env=env)
    for bad in ("ext.", "ext.Big", "ext.a-b", "ext.a,ext.b,ext.c,ext.d,ext.e"):
        _, err = expect(2, "run", "--engines", bad, cases[0], env=env)
        check("engine" in err, f"--engines {bad}: {err}")


def stand_in_gpus(count):
    """A PATH whose nvidia-smi lists `count` stand-in GPUs (indices 0.., UUIDs GPU-...-k)."""
    os.makedirs("bin", exist_ok=True)
    with open("bin/nvidia-smi", "w") as f:
        f.write("#!/bin/sh\n" + "".join(f"echo '{k}, GPU-0000{k}-stand-in-{k}, Stand-in GPU'\n"
                                        for k in range(count)))
    os.chmod("bin/nvidia-smi", 0o755)
    return dict(ENV, PATH=os.path.abspath("bin") + ":" + ENV.get("PATH", ""))


def digests(db):
    """{(canonical, repeat, engine, baseline, output): (status, digest)} of a database."""
    return {tuple(r[:5]): tuple(r[5:]) for r in query(
        db, "SELECT c.canonical, r.repeat, r.engine, r.baseline, r.output, r.status, r.digest "
            "FROM results r JOIN cases c ON c.id = r.case_id")}


def gpus_refused(env, command, *more):
    """Bad GPU names (and the combinations `more` adds) refuse `command` with exit 2 before
    anything is written."""
    for args, want in ((["--gpus", "3"], "this host has 2 GPUs"),
                       (["--gpu-ids", "0,0"], "named twice"),
                       (["--gpu-ids", "5"], "5 is not a GPU of this host"),
                       (["--gpus", "1", "--gpu-ids", "0"], "give one of them"),
                       (["--gpus", "x"], "bad value"), *more):
        _, err = expect(2, *command, "--db", "bad.db", *args, env=env)
        check(want in err, f"{command[0]} {args}: {err}")
        check(not os.path.exists("bad.db"), f"{command[0]} {args} left bad.db")
    _, err = expect(2, *command, "--gpus", "all", "--db", "bad.db",
                    env=dict(ENV, PATH="/nonexistent"))
    check("no GPU here" in err and not os.path.exists("bad.db"), err)


def worker_pids(p, n):
    """The pids of the n workers that tbecheck process p started (within 60 s)."""
    deadline = time.time() + 60
    kids = []
    while time.time() < deadline and len(kids) < n and p.poll() is None:
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
        time.sleep(0.05)
    check(len(kids) == n, f"workers: {kids}")
    return kids


def until_stored(pid):
    """Waits (60 s at most) until worker pid has stored a result in its own database, so a kill
    then finds work done however loaded the machine is."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    path = argv[argv.index("--db") + 1]
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
                if c.execute("SELECT count(*) FROM results").fetchone()[0]:
                    return
        except sqlite3.Error:
            pass
        time.sleep(0.05)
    check(False, f"worker {pid} stored no result in 60 s")


def test_gpus():
    """run --gpus / --gpu-ids: a worker per GPU (nvidia-smi's list; stand-ins here), each on its
    shard; one database with the results of one unsharded run, one campaign, each run with its
    GPU's UUID; bad GPU names refused before anything runs; a killed worker loses only its
    current case."""
    env = stand_in_gpus(2)
    expect(0, "run", "--db", "one.db", "--engines", "ref", smoke(), env=env)
    out, _ = expect(0, "run", "--gpus", "all", "--db", "two.db", "--engines", "ref", smoke(),
                    env=env)
    check("gpu 0 (GPU-00000-stand-in-0, Stand-in GPU)" in out and "campaign on 2 GPUs" in out,
          f"no per-GPU summary:\n{out[-1500:]}")
    runs = query("two.db", "SELECT shard, gpu_uuid, complete FROM runs ORDER BY shard")
    check(runs == [("1/2", "GPU-00000-stand-in-0", 1), ("2/2", "GPU-00001-stand-in-1", 1)],
          f"runs: {runs}")
    check(scalar("two.db", "SELECT count(DISTINCT campaign) FROM runs") == 1, "two campaigns")
    check(digests("two.db") == digests("one.db"), "the two GPUs' results differ from one run's")
    out, _ = expect(0, "report", "--db", "two.db", env=env)
    shards = [line for line in out.splitlines() if line.startswith("  run ")]
    check(len(shards) == 2 and all("complete" in s and "incomplete" not in s and "started 20" in s
                                   for s in shards) and
          "(GPU-00000-stand-in-0)" in out and "(GPU-00001-stand-in-1)" in out,
          f"report's campaign lines do not name each run's GPU, start and state:\n{out[:2500]}")
    check(not [n for n in os.listdir(".") if ".gpus-" in n], f"left: {os.listdir('.')}")
    # a case list on standard input reaches every worker
    r = subprocess.run([TB, "run", "--gpu-ids", "1,0", "--db", "in.db", "--engines", "ref", "-"],
                       input="B=4\nB=5 L=2\nB=6\n", capture_output=True, text=True, env=env)
    check(r.returncode == 0 and scalar("in.db", "SELECT count(*) FROM cases") == 3,
          f"stdin: exit {r.returncode}: {r.stderr}")
    check(query("in.db", "SELECT shard, gpu_uuid FROM runs ORDER BY shard") ==
          [("1/2", "GPU-00001-stand-in-1"), ("2/2", "GPU-00000-stand-in-0")], "--gpu-ids order")
    gpus_refused(env, ["run", "--engines", "ref", "B=4"],
                 (["--gpus", "all", "--shard", "1/2"], "without them"))
    # kill -9 one worker mid-run: the other finishes, the killed one's cases so far are kept
    with open("many.cases", "w") as f:
        f.write("".join(f"T=4 B=1024 L=20 D=128 seed={k}\n" for k in range(300)))
    p = subprocess.Popen([TB, "run", "--gpus", "2", "--db", "k.db", "--engines", "ref",
                          "many.cases"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids = worker_pids(p, 2)
    until_stored(kids[1])
    os.kill(kids[1], signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 3 and "was killed by signal 9" in err + out, f"exit {p.returncode}:"
          f" {err}\n{out[-800:]}")
    got = query("k.db", "SELECT shard, complete, (SELECT count(DISTINCT case_id) FROM results "
                        "WHERE run = runs.id) FROM runs ORDER BY shard")
    check(len(got) == 2 and got[0][1:] == (1, 150) and got[1][1] == 0 and 0 < got[1][2] < 150,
          f"after the kill: {got}")


def gpu_runs(db):
    """[(gpu_uuid, seed, complete, cases, campaign)] of a database's runs, by GPU."""
    return [(u, int(re.search(r"--seed (\d+)", a).group(1)), c, n, k) for u, a, c, n, k in query(
        db, "SELECT gpu_uuid, argv, complete, (SELECT count(DISTINCT case_id) FROM results "
            "WHERE run = runs.id), campaign FROM runs ORDER BY gpu_uuid")]


def run_cases(db, uuid=None):
    """The canonical texts of the cases of a database's runs (of GPU uuid's only, if given)."""
    return {c for (c,) in query(db, "SELECT DISTINCT c.canonical FROM results r JOIN cases c ON "
                                    "c.id = r.case_id JOIN runs ON runs.id = r.run WHERE "
                                    "?1 IS NULL OR runs.gpu_uuid = ?1", (uuid,))}


def test_fuzz_gpus():
    """fuzz --gpus / --gpu-ids: a worker fuzz per GPU (stand-ins here), worker k of N on seed
    X*N+k; one database, one campaign, each run with its GPU's UUID, no case drawn twice; the same
    command again draws the same cases; bad GPU names refused before anything runs; a killed
    worker loses only its current case, the other's run completes."""
    env = stand_in_gpus(2)
    fuzz = ["fuzz", "--seconds", "60", "--max-cases", "40", "--seed", "7", "--engines", "ref"]
    out, _ = expect(0, *fuzz, "--gpus", "all", "--db", "two.db", env=env)
    check("gpu 0 (GPU-00000-stand-in-0, Stand-in GPU): seed 14: 40 cases" in out and
          "gpu 1 (GPU-00001-stand-in-1, Stand-in GPU): seed 15: 40 cases" in out and
          "campaign on 2 GPUs" in out, f"no per-GPU summary:\n{out[-1500:]}")
    runs = gpu_runs("two.db")
    check([r[:3] for r in runs] == [("GPU-00000-stand-in-0", 14, 1), ("GPU-00001-stand-in-1", 15, 1)]
          and all(0 < r[3] <= 40 for r in runs), f"runs: {runs}")
    check(runs[0][4] and runs[0][4] == runs[1][4], f"not one campaign: {runs}")
    zero, one = run_cases("two.db", runs[0][0]), run_cases("two.db", runs[1][0])
    check(not zero & one, f"both workers drew {sorted(zero & one)[:3]}")
    check(not [n for n in os.listdir(".") if ".gpus-" in n], f"left: {os.listdir('.')}")
    # worker 1's stream is seed 7*2+1 alone; the same command draws the same, as one campaign
    expect(0, *fuzz[:6], "15", *fuzz[7:], "--db", "alone.db", env=env)
    check(run_cases("alone.db") == one, "worker 1 did not draw what --seed 15 draws")
    expect(0, *fuzz, "--gpu-ids", "0,1", "--db", "again.db", env=env)
    again = gpu_runs("again.db")
    check([r[:2] + r[4:] for r in again] == [r[:2] + r[4:] for r in runs] and
          run_cases("again.db") == zero | one, f"the same command drew otherwise: {again}")
    gpus_refused(env, ["fuzz", "--engines", "ref", "--seconds", "1"],
                 (["--gpus", "all", "--inject-fault", "ref:output"], "hold no fault"),
                 (["--gpus", "all", "--campaign", "a b"], "bad value 'a b' for --campaign"))
    # kill -9 one worker mid-run: the other finishes, the killed one's cases so far are kept
    p = subprocess.Popen([TB, "fuzz", "--seconds", "8", "--seed", "3", "--engines", "ref",
                          "--gpus", "2", "--db", "k.db"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids = worker_pids(p, 2)
    with open(f"/proc/{kids[1]}/environ", "rb") as f:
        killed = re.search(rb"TBECHECK_GPU_UUID=([^\0]*)", f.read()).group(1).decode()
    until_stored(kids[1])
    os.kill(kids[1], signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 3 and "was killed by signal 9" in err + out and
          "its run stays incomplete" in err, f"exit {p.returncode}: {err}\n{out[-800:]}")
    got = {r[0]: r[2:4] for r in gpu_runs("k.db")}
    other = ({"GPU-00000-stand-in-0", "GPU-00001-stand-in-1"} - {killed}).pop()
    check(len(got) == 2 and got[other][0] == 1 and got[other][1] > 0 and got[killed][0] == 0
          and got[killed][1] > 0, f"after the kill of {killed}'s worker: {got}")


def test_race_gpus():
    """race --gpus / --gpu-ids: a worker race per GPU (stand-ins here), worker k of N on seed
    X*N+k. Without a GPU each worker says so and races nothing, as race alone does: exit 0, no
    database; bad GPU names and --cases refused before anything runs."""
    env = stand_in_gpus(2)
    rc, out, err = tb("race", "--seconds", "2", "--seed", "1", "--gpus", "all", "--db", "r.db",
                      env=env)
    if CUDA == "on" and "warning: engine gpu did not run" not in out:
        print("a GPU is here: the no-GPU path was not taken")
        return SKIP
    for k in (0, 1):
        check(f"gpu {k}: warning: engine gpu did not run" in out and
              f"gpu {k} (GPU-0000{k}-stand-in-{k}, Stand-in GPU): seed {2 + k}: 0 cases" in out,
              f"gpu {k}: exit {rc}\n{out}{err}")
    check(rc == 0 and "no worker stored anything" in out and not os.path.exists("r.db"),
          f"race without a GPU: exit {rc}, r.db {os.path.exists('r.db')}\n{out}{err}")
    cases = case_file("r.cases", ["opt=sgd B=4"])
    gpus_refused(env, ["race", "--seconds", "1"],
                 (["--gpus", "all", "--cases", cases], "race --cases FILE without them"))


def test_upgrade_v4():
    """A database of schema 4 (before races) is refused by readers, upgraded by the next writer
    (races created, empty), and merges and reports afterwards."""
    expect(0, "run", "--engines", "ref", "B=4 L=2 D=8", "opt=sgd B=4 L=3")
    shutil.copy("tbecheck.db", "v4.db")
    with sqlite3.connect("v4.db") as c:
        c.execute("DROP TABLE races")
        c.execute("ALTER TABLE runs DROP COLUMN engine_versions")
        c.execute("ALTER TABLE runs DROP COLUMN gpu_uuid")
        c.execute("UPDATE meta SET schema_version = 4")
    with sqlite3.connect("v4.db") as c:  # version 4's results.engine took no 'ext.NAME'
        c.execute("PRAGMA writable_schema = ON")
        c.execute("UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = 'results'",
                  old_engine_check())
    before = query("v4.db", "SELECT * FROM results ORDER BY id")
    _, err = expect(2, "list", "--db", "v4.db")
    check("schema version 4, older than this tbecheck's 6" in err and "upgrades it" in err, err)
    expect(0, "run", "--db", "v4.db", "--engines", "ref", "B=5 L=2")
    check(scalar("v4.db", "SELECT schema_version FROM meta") == 6, "not upgraded to 6")
    check(scalar("v4.db", "SELECT sql FROM sqlite_master WHERE name = 'results'") ==
          scalar("tbecheck.db", "SELECT sql FROM sqlite_master WHERE name = 'results'"),
          "the upgraded results table's CHECKs differ from a new one's")
    check(scalar("v4.db", "SELECT count(*) FROM races") == 0, "races not created empty")
    check(query("v4.db", "SELECT * FROM results ORDER BY id")[:len(before)] == before,
          "the upgrade changed stored results")
    check([r[1] for r in query("v4.db", "PRAGMA table_info(runs)")] ==
          [r[1] for r in query("tbecheck.db", "PRAGMA table_info(runs)")],
          "the upgraded runs table's columns differ from a new one's")
    cols = [r[1] for r in query("v4.db", "PRAGMA table_info(races)")]
    check(cols == [r[1] for r in query("tbecheck.db", "PRAGMA table_info(races)")],
          f"the upgraded races table differs from a new one: {cols}")
    check(scalar("v4.db", "PRAGMA integrity_check") == "ok", "the upgrade broke the database")
    expect(0, "merge", "tbecheck.db", "v4.db")
    check(scalar("tbecheck.db", "SELECT count(*) FROM runs") == 2,
          "merge after the upgrade: the copied run is known by its uid, the new one is added")
    expect(0, "report", "--db", "v4.db")


def test_race_nogpu():
    """tbecheck race: bad input is exit 2 anywhere; without a GPU it says so and skips (exit 0,
    nothing written), as `run --engines gpu` does."""
    cases = case_file("r.cases", ["opt=sgd B=4", "B=4"])
    for args, words in ((["--launches", "0"], "bad value for --launches: 0"),
                        (["--seconds", "x"], "bad value for --seconds"),
                        (["--seed", "-1"], "bad value for --seed"),
                        (["--bogus"], "unknown option"), (["extra"], "unexpected argument"),
                        (["--cases", cases], "r.cases:2: key 'opt'"),
                        (["--cases", case_file("a.cases", ["opt=sgd bwd.combine=atomic"])],
                         "key 'bwd.combine'"),
                        (["--cases", case_file("g.cases", ["opt=sgd bwd.grid=70000"])],
                         "key 'bwd.grid'"),
                        (["--cases", "missing.cases"], "missing.cases")):
        _, err = expect(2, "race", "--db", "r.db", *args)
        check(words in err, f"race {args}: '{words}' not in: {err}")
    check(not os.path.exists("r.db"), "bad input wrote a database")
    out, _ = expect(0, "race", "--help")
    check(out.startswith("usage: tbecheck race"), out)
    rc, out, err = tb("race", "--seconds", "1", "--db", "r.db")
    if "engine gpu: skip" not in out:
        print("a GPU is here: the no-GPU path was not taken (cli_race runs the race)")
        return SKIP
    check(rc == 0 and "warning: engine gpu did not run" in out and "nothing was raced" in out,
          f"race without a GPU: exit {rc}\n{out}{err}")
    check(not os.path.exists("r.db"), "race without a GPU wrote a database")


def test_race():
    """The GPU backward raced for 20 s: every launch of every case has the reference's bits, one
    outcome per case, and the database counts them (label gpu)."""
    rc, out, err = tb("race", "--seconds", "20", "--seed", "1", "--db", "race.db")
    if "engine gpu: skip" in out:
        print(out.splitlines()[0])
        return SKIP
    check(rc == 0, f"race: exit {rc}\n{out[-3000:]}{err}")
    rows = query("race.db", "SELECT launches, distinct_outcomes, mismatches, long_runs, chunks, "
                            "variants FROM races")
    check(len(rows) >= 3, f"only {len(rows)} cases raced in 20 s")
    check(all(r[0] == 20 and r[1] == 1 and r[2] == 0 for r in rows),
          f"launches / outcomes / mismatches: {[r[:3] for r in rows if r[1:3] != (1, 0)][:5]}")
    check(all(r[3] >= 1 and r[4] >= 4 for r in rows),
          f"cases without long runs of several chunks: {[r[3:5] for r in rows][:10]}")
    check(all("order=shuffle" in r[5] and "noise=1" in r[5] and "grid=1 " in r[5] for r in rows),
          "the schedules were not varied")
    n = scalar("race.db", "SELECT count(DISTINCT case_id) FROM races")
    check(n == len(rows) and f"{len(rows)} cases raced, {20 * len(rows)} launches" in out,
          f"the summary line disagrees with the database:\n{out[-500:]}")
    bad = scalar("race.db", "SELECT count(*) FROM results WHERE path = 'backward.race' AND "
                            "status != 'pass'")
    check(bad == 0 and scalar("race.db", "SELECT count(*) FROM results") >= len(rows),
          f"{bad} results of the race did not pass")
    out, _ = expect(0, "list", "--failed", "--db", "race.db")
    check("(0 results)" in out, out)
    out, _ = expect(0, "report", "--db", "race.db")
    check("races of the run" in out, out)


def test_bad_input_more():
    """Inputs that used to be accepted, or refused with the wrong code."""
    _, err = expect(2, "run", "--db", "", "--engines", "ref", "B=4")
    check("database path is empty" in err, err)
    with open("nul.cases", "wb") as f:
        f.write(b"B=2\nB=4\0 seed=9\n")
    _, err = expect(2, "run", "--engines", "ref", "nul.cases")
    check("nul.cases:2" in err and "NUL" in err, err)
    check(not os.path.exists("tbecheck.db"), "a case file with a NUL byte was run")
    for args, words in ((["export", "missing.cases", "out"], "missing.cases"),
                        (["run", "missing.cases"], "missing.cases"),
                        (["list"], "no such database"),
                        (["merge", "m1.db", "nonexist.db"], "nonexist.db: no such database")):
        _, err = expect(2, *args)
        check(words in err, f"{args}: '{words}' not in: {err}")
    expect(0, "run", "--engines", "ref", "B=4 L=2")
    for cmd in ("list", "report"):
        _, err = expect(2, cmd, "--run", "999")
        check("has no run 999" in err, f"{cmd} --run 999: {err}")


def test_option_errors():
    """Each option error names the option; each bad argument says what it should be."""
    for args, words in ((["run", "--shard", "3/2", "B=4"], "bad value '3/2' for --shard"),
                        (["run", "--shard", "0/0", "B=4"], "bad value '0/0' for --shard"),
                        (["run", "--repeat", "-1", "B=4"], "bad value '-1' for --repeat"),
                        (["run", "--max-violations", "-5", "B=4"],
                         "bad value '-5' for --max-violations"),
                        (["run", "--max-memory", "12Q", "B=4"], "for --max-memory"),
                        (["list", "--run", "abc"], "bad value 'abc' for --run"),
                        (["show", "abc"], "bad result id 'abc'"),
                        (["show", "1.5"], "bad result id '1.5'"),
                        (["show", "99999999999999999999999"], "bad result id"),
                        (["random", "abc", "1"], "bad N 'abc'"),
                        (["random", "99999999999999999999", "1"], "bad N"),
                        (["random", "1", "x3"], "bad SEED 'x3'")):
        r = subprocess.run([TB, *args], capture_output=True, text=True, env=ENV, timeout=20)
        check(r.returncode == 2 and words in r.stderr,
              f"{args}: exit {r.returncode}, '{words}' not in: {r.stderr}")


def test_export_dir():
    """export writes into a new or empty directory, or replaces an earlier export with --force;
    it validates every case before it writes one."""
    expect(0, "export", "B=4 opt=sgd", "e")
    check(os.path.exists("e/grad_output.npy"), "no grad_output.npy for a backward case")
    _, err = expect(2, "export", "B=4", "e")
    check("not empty" in err and "--force" in err, err)
    expect(0, "export", "B=4", "e", "--force")
    check(not os.path.exists("e/grad_output.npy"), "a stale grad_output.npy was left in e/")
    with open("e/notes.txt", "w") as f:
        f.write("mine\n")
    _, err = expect(2, "export", "B=4", "e", "--force")
    check("notes.txt" in err and os.path.exists("e/notes.txt") and
          os.path.exists("e/manifest.json"), f"--force touched a directory it should refuse: {err}")
    for name, lines, words in (("mixedbad.cases", ["B=4", "B=4 Q=1"], "mixedbad.cases:2"),
                               ("genbad.cases", ["B=4", "B=1 corrupt=decreasing"],
                                "corrupt")):
        _, err = expect(2, "export", case_file(name, lines), "d_" + name)
        check(words in err, err)
        check(not os.path.exists("d_" + name), f"{name}: files written before the bad case")
    expect(0, "export", case_file("two.cases", ["B=4", "B=5"]), "d2")
    expect(0, "export", case_file("one.cases", ["B=6"]), "d2", "--force")
    check(sorted(os.listdir("d2")) == ["0000"], f"stale case directories: {os.listdir('d2')}")


def test_output_paths():
    """An output path that cannot be written is bad input (exit 2), found before any work, and
    the check leaves no file behind; a directory export makes with its parents still works."""
    expect(0, "run", "--engines", "ref", "B=4")
    os.makedirs("ro")
    os.chmod("ro", 0o555)
    try:
        bad = ["/proc/x", "ro/x"] if os.geteuid() else ["/proc/x"]  # root writes into ro/
        for path in bad:
            _, err = expect(2, "export", "B=4", path)
            check(f"cannot write the export directory {path}" in err, err)
            _, err = expect(2, "report", "--html", path + ".html")
            check(f"cannot write the report {path}.html" in err and "nothing was done" in err, err)
        _, err = expect(2, "report", "--html", "ro")
        check("it is a directory" in err, err)
    finally:
        os.chmod("ro", 0o755)
    check(os.listdir("ro") == [], f"the checks left {os.listdir('ro')}")
    expect(0, "export", "B=4", "a/b/c")
    check(os.path.exists("a/b/c/manifest.json"), "export did not make a/b/c")


def test_oracle_tmp():
    """The worker engines' exchange directory carries its owner's pid: SIGTERM removes it (the
    worker first), and a later run removes those a dead owner left (SIGKILL), never a live
    one's."""
    if subprocess.run([os.environ.get("TBECHECK_PYTHON") or sys.executable, "-c",
                       "import numpy"]).returncode:
        print("SKIP: NumPy is not installed for the oracle's Python")
        return SKIP
    tmp = os.path.abspath("tmp")
    os.makedirs(tmp)
    env = dict(ENV, TMPDIR=tmp)
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = f"tbecheck-engines-{gone.pid}-abc123"
    live = f"tbecheck-engines-{os.getpid()}-def456"  # this test is alive
    for d in (stale, live):
        os.makedirs(os.path.join(tmp, d, "oracle"))
        open(os.path.join(tmp, d, "oracle", "weights.npy"), "wb").close()
    out, _ = expect(0, "run", "--engines", "ref,oracle", "B=4", env=env)
    check("ref:oracle" in out or "oracle:ref" in out, f"the oracle did not run:\n{out}")
    check(os.listdir(tmp) == [live], f"left in TMPDIR after a run: {os.listdir(tmp)}")
    p = subprocess.Popen([TB, "run", "--engines", "ref,oracle", "--repeat", "100000",
                          "T=2 B=64 L=8 D=64"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    mine = f"tbecheck-engines-{p.pid}-"
    deadline = time.time() + 60
    while time.time() < deadline:
        ours = [n for n in os.listdir(tmp) if n.startswith(mine)]
        if ours and os.path.isdir(os.path.join(tmp, ours[0], "oracle")) and \
                os.listdir(os.path.join(tmp, ours[0], "oracle")):
            break
        time.sleep(0.02)
    check(ours, f"no {mine}* directory with files appeared in 60 s: {os.listdir(tmp)}")
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    check(p.returncode == -signal.SIGTERM, f"exit {p.returncode} after SIGTERM")
    check(os.listdir(tmp) == [live], f"left in TMPDIR after SIGTERM: {os.listdir(tmp)}")


def test_stdin():
    """run - reads a case file from standard input, as a pipe from a generator feeds it."""
    def piped(text, *args):
        r = subprocess.run([TB, "run", "--engines", "ref", *args], input=text,
                           capture_output=True, text=True, env=ENV)
        return r.returncode, r.stdout, r.stderr
    rc, out, err = piped("B=4\n# a comment\nB=5 L=2  # two lookups a bag\n", "-", "B=6")
    check(rc == 0 and "run 1: 3 cases" in out, f"exit {rc}\n{out}\n{err}")
    check(query("tbecheck.db", "SELECT count(*) FROM cases") == [(3,)], "not 3 cases stored")
    rc, _, err = piped("B=4\nB=4 Q=1\n", "-")
    check(rc == 2 and "stdin:2: bad case (key 'Q')" in err, f"exit {rc}: {err}")
    rc, _, err = piped("B=4\n", "-", "-")
    check(rc == 2 and "given twice" in err, f"exit {rc}: {err}")
    rc, out, err = piped("", "-")
    check(rc == 0 and "warning: no case ran" in out, f"exit {rc}\n{out}\n{err}")
    _, err = expect(2, "export", "-", "d")
    check("not '-'" in err and not os.path.exists("d"), err)
    check(runs_in("tbecheck.db") == 2, "a refused run was recorded")


def tree_bytes(top="."):
    """Every file under top with its bytes: what a refused command must leave as it was."""
    out = {}
    for d, _, files in os.walk(top):
        for f in files:
            out[os.path.join(d, f)] = read_bytes(os.path.join(d, f))
    return out


def test_refused_unchanged():
    """The general rule, command by command: an input refused at the command's last check (the
    last thing it checks before it would report) gets exit 2 and leaves every file as it was:
    the database, the output paths, and nothing new beside them."""
    expect(0, "run", "--engines", "ref", "B=4 seed=1")
    expect(0, "run", "--db", "other.db", "--engines", "ref", "B=5 seed=2")
    with open("bad.db", "w") as f:
        f.write("not a database\n" * 8)
    expect(0, "export", "B=4 L=2 D=8", "ex")
    expect(0, "export", "B=3", "e")
    with open("e/notes.txt", "w") as f:
        f.write("mine\n")
    with open("page.html", "w") as f:
        f.write("<p>an earlier report</p>\n")
    race_cases = case_file("race.cases", ["B=4 opt=sgd", "B=4 opt=sgd bwd.combine=atomic"])
    exp_cases = case_file("exp.cases", ["B=4", "B=5"])
    far = ["--inject-fault", "ref:output@99999999"]
    commands = [
        ("run", ["run", "--engines", "ref", "B=4", "B=5 L=2", *far], "landed nowhere"),
        ("fuzz", ["fuzz", "--engines", "ref", "--seconds", "1", *far], "landed nowhere"),
        ("import", ["import", "ex", "--engines", "ref", *far], "landed nowhere"),
        ("replay", ["replay", "--engines", "ref", "B=4", *far], "landed nowhere"),
        ("merge", ["merge", "tbecheck.db", "other.db", "bad.db"], "bad.db"),
        ("export", ["export", exp_cases, "e", "--force"], "notes.txt"),
        ("report", ["report", "--html", "page.html", "--since", "deadbeef"], "deadbeef"),
        ("list", ["list", "--run", "999"], "no run 999"),
        ("show", ["show", "999"], "no result 999"),
        ("race", ["race", "--cases", race_cases], "race.cases:2"),
        ("random", ["random", "3", "x"], "bad SEED"),
    ]
    for name, args, words in commands:
        before = tree_bytes()
        out, err = expect(2, *args)
        check(words in err, f"{name}: '{words}' not in: {err}")
        after = tree_bytes()
        changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        check(not changed, f"{name}, refused, changed {changed}")
        if name == "random":
            check(out == "", f"random, refused, printed cases: {out[:200]}")


def test_big_cases():
    """Cases that fit the language but not the machine are refused at once, with both figures,
    before anything is generated or stored; no kill, no result."""
    # the first three need tens of GB (the GPU host has 128 GiB), so a limit makes them too big
    # on every machine; the fourth needs petabytes
    for case, limit in (("E=600000000 D=8", ["--max-memory", "8G"]),
                        ("B=1 L=2147483647", ["--max-memory", "8G"]),
                        ("B=2147483647 L=1000", ["--max-memory", "8G"]),
                        ("T=2 E=1099511627776 D=2048", [])):
        for cmd in (["run", "--engines", "ref"], ["replay", "--engines", "ref"], ["export"]):
            args = [*cmd, *limit, case] + (["big"] if cmd == ["export"] else [])
            t0 = time.time()
            r = subprocess.run([TB, *args], capture_output=True, text=True, env=ENV, timeout=60)
            check(r.returncode == 2 and "of host memory" in r.stderr and "available" in r.stderr,
                  f"{args}: exit {r.returncode}: {r.stderr}")
            check(time.time() - t0 < 20, f"{args}: took {time.time() - t0:.0f} s to refuse")
    _, err = expect(2, "run", "--engines", "ref", "--max-memory", "1M", "B=512 D=128")
    check("1.0 MB available (--max-memory)" in err, err)
    expect(0, "run", "--engines", "ref", "--max-memory", "64M", "B=512 D=128")
    _, err = expect(2, "run", "--engines", "ref", "hot=0:1:1000000000")
    check("key 'hot'" in err and "at most 16" in err, err)
    check(runs_in("tbecheck.db") == 1, "a refused case was recorded")


def write_npy(path, descr, shape, data=b""):
    """A .npy file without NumPy: format 1.0, header padded to 64 bytes."""
    head = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)}, }}"
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode() + data)


def test_import_edge():
    """import with no lookups at all (UBSan once saw a NULL memcpy source), and with a directory
    where weights.npy should be."""
    os.makedirs("empty")
    write_npy("empty/weights.npy", "<f4", (8,), b"\0" * 32)
    write_npy("empty/E.npy", "<i8", (2,), (2).to_bytes(8, "little") * 2)
    write_npy("empty/D.npy", "<i4", (2,), (2).to_bytes(4, "little") * 2)
    write_npy("empty/indices.npy", "<i8", (0,))
    write_npy("empty/offsets.npy", "<i8", (5,), b"\0" * 40)  # T=2, B=2: every bag empty
    out, _ = expect(0, "import", "empty", "--engines", "ref")
    check("1 case" in out, out)
    shutil.copytree("empty", "dirw")
    os.remove("dirw/weights.npy")
    os.makedirs("dirw/weights.npy")
    _, err = expect(2, "import", "dirw", "--engines", "ref")
    check("weights.npy is not a .npy file (not a regular file)" in err, err)
    # weights are flat and E holds one value per table: 2-D shapes of the same count are refused
    for name, descr, shape, data in (("weights", "<f4", (4, 2), b"\0" * 32),
                                     ("E", "<i8", (1, 2), (2).to_bytes(8, "little") * 2)):
        shutil.rmtree("shaped", ignore_errors=True)
        shutil.copytree("empty", "shaped")
        write_npy(f"shaped/{name}.npy", descr, shape, data)
        _, err = expect(2, "import", "shaped", "--engines", "ref")
        check(f"{name}.npy is shaped {shape}" in err and "one-dimensional" in err, err)


def test_readonly_db():
    """An archived database (read-only file in a read-only directory) can still be read."""
    top, as_other = ".", {}
    if os.geteuid() == 0:
        # root writes anywhere: read it as nobody, as an archive is read, with the database and a
        # copy of tbecheck where nobody can reach them (a checkout in mktemp -d's 0700 is not)
        top = tempfile.mkdtemp(dir="/tmp")
        os.chmod(top, 0o755)
        as_other = {"preexec": lambda: (os.setgid(65534), os.setuid(65534)),
                    "exe": shutil.copy2(TB, top), "cwd": top}
    arch = os.path.join(top, "arch")
    db = os.path.join(arch, "r.db")
    os.makedirs(arch)
    try:
        expect(0, "run", "--db", db, "--engines", "ref", "B=4 L=2")
        check(not os.path.exists(db + "-wal"), "the writer left its WAL file")
        os.chmod(db, 0o444)
        os.chmod(arch, 0o555)
        for args in (["list"], ["report"], ["show", "1"], ["list", "--failed"]):
            out, err = expect(0, *args, "--db", os.path.abspath(db), **as_other)
            check("readonly" not in err, f"{args}: {err}")
        check(os.listdir(arch) == ["r.db"], f"a reader wrote beside it: {os.listdir(arch)}")
        # a writer who may not write the file (0444 in a 0755 directory) is refused before any
        # work (exit 2), naming the file and its permission; the database stays as it was
        os.chmod(arch, 0o755)
        other = os.path.abspath(os.path.join(top, "other.db"))
        expect(0, "run", "--db", other, "--engines", "ref", "B=5")
        before, dbp = db_bytes(db), os.path.abspath(db)
        for args in (["run", "--db", dbp, "--engines", "ref", "B=4"], ["merge", dbp, other]):
            _, err = expect(2, *args, **as_other)
            check(f"{dbp} cannot be written by this user" in err and "mode 0444" in err, err)
        check(db_bytes(db) == before and os.listdir(arch) == ["r.db"],
              f"a refused writer changed {os.listdir(arch)}")
    finally:
        os.chmod(arch, 0o755)
        if top != ".":
            shutil.rmtree(top)


def test_version():
    out, _ = expect(0, "--version")
    lines = out.splitlines()
    check(lines[0].startswith("tbecheck ") and any(l.startswith("commit ") for l in lines) and
          any(l.startswith("build ") for l in lines) and any(l.startswith("CUDA ") for l in lines),
          f"--version: {out}")
    cuda = [l for l in lines if l.startswith("CUDA ")][0]
    want = {"on": "CUDA     on (toolkit ", "option-off": "CUDA     off (TBE_CUDA=OFF",
            "no-compiler": "CUDA     off (no CUDA compiler was found"}.get(CUDA)
    check(want is None or cuda.startswith(want), f"the build's CUDA is {CUDA}, --version: {cuda}")
    out, _ = expect(0, "run", "--engines", "gpu", "B=4")
    reason = [l for l in out.splitlines() if l.startswith("engine gpu: skip")]
    if not reason:
        return  # a GPU is here
    check("insufficient" not in reason[0], reason[0])
    if "CUDA     on" in out and not os.path.exists("/proc/driver/nvidia/version"):
        check("no NVIDIA driver or GPU found" in reason[0], reason[0])


def test_summary():
    """The summary counts cases and repeats, warns about an empty run, and every case stores at
    least its outcome."""
    out, _ = expect(0, "run", "--engines", "ref", "--repeat", "3", "B=4 L=2", "B=5")
    check("2 cases x 3 repeats = 6 case runs, 0 failed" in out, out)
    out, _ = expect(0, "run", "--engines", "ref", case_file("empty.cases", ["# nothing"]))
    check("warning: no case ran" in out, out)
    expect(0, "run", "--engines", "ref", "bounds=fatal invalid=0.5 corrupt=negative")
    rows = query("tbecheck.db", "SELECT status, reason FROM results WHERE run = 3")
    check(len(rows) == 1 and "FATAL" in rows[0][1], f"the FATAL case stored: {rows}")



class Page(html.parser.HTMLParser):
    """The parts of an HTML page the report test reads: every tag with its attributes, the rows
    of every table (their attributes and cells by data-col), the text of each <pre>, and the
    text inside <style>."""

    def __init__(self):
        super().__init__()
        self.tags, self.rows, self.pres, self.styles, self.ids = [], [], [], [], {}
        self.stack, self.cell, self.row, self.pre, self.style = [], None, None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            self.ids[a["id"]] = tag
        if tag == "tr":
            self.row = {"attrs": a, "cells": {}, "text": ""}
            self.rows.append(self.row)
        elif tag == "td" and self.row is not None:
            self.cell = a.get("data-col", "?")
            self.row["cells"][self.cell] = ""
        elif tag == "pre":
            self.pre = {"attrs": a, "text": ""}
            self.pres.append(self.pre)
        elif tag == "style":
            self.style = ""

    def handle_endtag(self, tag):
        if tag == "td":
            self.cell = None
        elif tag == "tr":
            self.row = None
        elif tag == "pre":
            self.pre = None
        elif tag == "style" and self.style is not None:
            self.styles.append(self.style)
            self.style = None

    def handle_data(self, data):
        if self.row is not None and self.cell is not None:
            self.row["cells"][self.cell] += data
        if self.row is not None:
            self.row["text"] += data
        if self.pre is not None:
            self.pre["text"] += data
        if self.style is not None:
            self.style += data


def parse_page(path):
    p = Page()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    return p


def check_self_contained(p):
    """No script, and nothing that a browser would fetch: every link and source points into the
    page (#...), CSS has no url() outside it and no @import."""
    for tag, a in p.tags:
        check(tag not in ("script", "link", "iframe", "object", "embed", "base"),
              f"<{tag}> in a self-contained page: {a}")
        for k, v in a.items():
            if k in ("href", "src", "xlink:href", "srcset", "action", "poster", "data"):
                check(v is not None and v.startswith("#"), f"<{tag} {k}={v!r}> points outside")
            if k == "style" or k.startswith("on"):
                check(k == "style" and "url(" not in v.replace("url(#", ""), f"<{tag} {k}={v!r}>")
    for css in p.styles:
        check("@import" not in css and "url(" not in css.replace("url(#", ""), f"CSS: {css}")


def fnv_hash(text):
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def test_report():
    """tbecheck report --html over runs across three commits (A, B, C): a campaign of two merged
    shards at A; at B a clean run, a fault-injected one (the failure) and a benchmark whose time
    steps up; at C a run whose bits moved on one case (the drift) and differ between repeats on
    another (the flaky case), and a forward sweep. The page is parsed: each appears, with the database's numbers, and
    nothing in it points outside the file; the replay command it prints reproduces the failure."""
    r = subprocess.run([os.environ.get("TBECHECK_PYTHON") or sys.executable, "-c",
                        "import matplotlib"], capture_output=True)
    if r.returncode:
        print("SKIP: matplotlib is not installed for the report's Python")
        return SKIP
    oracle = subprocess.run([sys.executable, "-c", "import numpy"]).returncode == 0
    engines = "ref,oracle" if oracle else "ref"
    cases = case_file("r.cases", ["B=4 L=1 D=4", "T=2 B=3 E=10,20 D=4,8 L=2 weighted=1",
                                  "B=8 L=3 D=16 seed=3", "T=2 B=5 E=30 D=8 L=0..4 seed=4"])
    commit = {k: k * 40 for k in "abc"}
    db = "r.db"

    def at(c, run):
        with sqlite3.connect(db) as con:
            con.execute("UPDATE runs SET git_commit = ?, dirty = 0 WHERE id = ?", (commit[c], run))

    def bench(c, figures, kernel="gpu:forward"):
        """A benchmark run at commit c: {shape: ms} for `kernel` on one H100."""
        with sqlite3.connect(db) as con:
            cur = con.execute(
                "INSERT INTO runs (uid, git_commit, dirty, host, cpu, gpu, tool_version, argv, "
                "engines, repeats, started, ended, complete, bench) VALUES (lower(hex("
                "randomblob(16))), ?, 0, 'h', 'cpu', 'H100 (sm_90, 81559 MiB)', '0', "
                "'gpu_forward_bench --db r.db', 'gpu', 1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), "
                "strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 1, 'gpu_forward_bench')", (commit[c],))
            for shape, ms in figures.items():
                text = f"T=32 B=65536 E=1000000 D=128 L=32 wdtype=fp16 bounds=none seed={shape[1]}"
                con.execute("INSERT OR IGNORE INTO cases (canonical, hash) VALUES (?, ?)",
                            (text, fnv_hash(text)))
                con.execute("INSERT INTO perf (run, case_id, repeat, kernel, ms, bytes, gbps, "
                            "shape, ceiling_gbps) SELECT ?, id, 0, ?, ?, 4e9, "
                            "4e9 / ? / 1e6, ?, 3000 FROM cases WHERE canonical = ?",
                            (cur.lastrowid, kernel, ms, ms, shape, text))

    # commit A: a campaign of two shards, merged
    for i in (1, 2):
        expect(0, "run", "--db", f"s{i}.db", "--engines", engines, "--shard", f"{i}/2", cases)
    expect(0, "merge", db, "s1.db", "s2.db")
    at("a", 1)
    at("a", 2)
    campaign = query(db, "SELECT DISTINCT campaign FROM runs")
    check(len(campaign) == 1 and campaign[0][0], f"the shards' campaign ids: {campaign}")
    bench("a", {"F1": 1.00, "F2": 2.00})
    # commit B: clean, then a one-ulp fault (run 4), then the benchmark steps up on F1 only
    expect(0, "run", "--db", db, "--engines", engines, cases)
    at("b", 4)
    expect(1, "run", "--db", db, "--engines", engines, "--inject-fault", "ref:output@3", cases)
    at("b", 5)
    bench("b", {"F1": 1.30, "F2": 2.60})
    # commit C: the bits of case 3's forward output move in both repeats (drift), those of case
    # 4's only in repeat 1 (flaky); F1 stays slow (a step), F2 comes back (one noisy point)
    expect(0, "run", "--db", db, "--engines", engines, "--repeat", "2", cases)
    at("c", 7)
    bench("c", {"F1": 1.32, "F2": 2.01})
    # and the forward sweep at C: ours and the gather ceiling on a few SW- shapes
    sweep = {"SW-base": (1.10, 1.00), "SW-L1": (0.30, 0.20), "SW-L64": (2.00, 2.10),
             "SW-D8": (0.50, 0.40), "SW-fp32": (2.40, 2.00)}
    bench("c", {s: t[0] for s, t in sweep.items()})
    bench("c", {s: t[1] for s, t in sweep.items()}, "ceiling:gather")
    drift_case, flaky_case = (scalar(db, "SELECT id FROM cases WHERE canonical = ?", (p,))
                              for p in ("B=8 D=16 L=3 seed=3", "T=2 B=5 E=30 D=8 L=0..4 seed=4"))
    with sqlite3.connect(db) as con:
        con.execute("UPDATE results SET digest = '00000000000000d1' WHERE run = 7 AND "
                    "case_id = ? AND engine = 'ref' AND output = 'output'", (drift_case,))
        con.execute("UPDATE results SET digest = '00000000000000f1' WHERE run = 7 AND "
                    "case_id = ? AND engine = 'ref' AND output = 'output' AND repeat = 1",
                    (flaky_case,))

    # the failure's page: run 5 (injected)
    out, _ = expect(0, "report", "--db", db, "--run", "5", "--html", "r5.html")
    check("r5.html" in out, out)
    p = parse_page("r5.html")
    check_self_contained(p)
    for section in ("runs", "summary", "failures", "bounds", "drift", "perf", "flaky"):
        check(p.ids.get(section) == "h2", f"no section {section}")
    # the summary: each pair and path with the database's counts
    summary = {(r["attrs"]["data-pair"], r["attrs"]["data-path"]): r["cells"]
               for r in p.rows if "data-pair" in r["attrs"] and "id" in r["attrs"]}
    want = query(db, "SELECT engine || ':' || baseline, path, "
                     "count(DISTINCT case_id || '/' || repeat), "
                     "count(DISTINCT CASE WHEN status = 'fail' THEN case_id || '/' || repeat END) "
                     "FROM results WHERE run = 5 GROUP BY 1, 2")
    check(len(want) == len(summary) and len(want) >= 2, f"summary rows: {summary} vs {want}")
    for pair, path, n, fails in want:
        cells = summary[(pair, path)]
        check(int(cells["cases"]) == n and int(cells["fail"]) == fails,
              f"summary {pair} {path}: {cells} vs cases {n} fail {fails}")
    links = {a.get("href") for t, a in p.tags if t == "a"}
    check("#fail-ref-exact-forward" in links and "fail-ref-exact-forward" in p.ids,
          "the fail count does not link to the failures")
    # every link on a page resolves: this one, and that of run 4, where everything passed
    expect(0, "report", "--db", db, "--run", "4", "--html", "r4.html")
    # (this test's own sqlite3 connections stay open, so the readers' tidiness is seen apart)
    os.makedirs("tidy")
    expect(0, "run", "--db", "tidy/t.db", "--engines", "ref", "B=4")
    expect(0, "report", "--db", "tidy/t.db", "--html", "tidy/t.html")
    check(sorted(os.listdir("tidy")) == ["t.db", "t.html"],
          f"the report's readers left {sorted(os.listdir('tidy'))}")
    for page in (p, parse_page("r4.html")):
        hrefs = [a.get("href") for t, a in page.tags if t == "a"]
        inner = [h for h in hrefs if h and h.startswith("#")]
        dangling = sorted({h for h in inner if h[1:] not in page.ids})
        check(len(inner) >= 8 and not dangling,
              f"{len(dangling)} of {len(inner)} links point nowhere: {dangling[:8]}")
        check(any(h.startswith("#worst-") for h in inner), "no link to a worst result")
    # the failures: every failed result, its violations, and a replay command that reproduces it
    failed = query(db, "SELECT r.id, c.canonical FROM results r JOIN cases c ON c.id = r.case_id "
                       "WHERE r.run = 5 AND r.status = 'fail'")
    check(failed, "the injected run has no failure")
    for rid, canon in failed:
        check(f"result-{rid}" in p.ids, f"failed result {rid} is not on the page")
    replays = [x["text"] for x in p.pres if x["attrs"].get("class") == "replay"]
    check(len(replays) == len(failed), f"{len(replays)} replay commands for {len(failed)}")
    rid, canon = failed[0]
    cmd = shlex.split(replays[0])
    check(cmd[:3] == ["tbecheck", "replay", canon] and "ref:output@3" in cmd, f"replay: {cmd}")
    coords = query(db, "SELECT coordinates, printf('%.17g', got) FROM violations "
                       "WHERE result = ?", (rid,))
    vrows = [r["cells"] for r in p.rows if r["cells"].get("coordinates")]
    for c, got in coords:
        check(any(v["coordinates"] == c and v["got"] == got for v in vrows),
              f"violation {c} {got} of result {rid} missing: {vrows[:3]}")
    out, _ = expect(1, *cmd[1:])
    check(coords[0][0] in out, f"the page's replay command does not reproduce it:\n{out}")
    # how close to the bound: a histogram per bound-checked path
    hist = [i for i in p.ids if i.startswith("hist-")]
    check("hist-ref-exact-forward" in hist and
          any(t == "svg" for t, _ in p.tags), f"histograms: {hist}")
    hrow = [r["cells"] for r in p.rows if r["attrs"].get("data-hist") == "ref:exact forward"][0]
    check(int(hrow["results"]) == scalar(db, "SELECT count(*) FROM results WHERE run = 5 AND "
                                             "path = 'forward' AND metric = 'bound_ratio' AND "
                                             "worst_bound_ratio IS NOT NULL"), f"{hrow}")
    # numeric drift: the fault's outputs at B's injected run, the moved bits at C
    ords = {code: o for o, code in query(db, "SELECT ord, label FROM run_code GROUP BY ord")}
    drift = {(r["attrs"]["data-ord"], r["attrs"]["data-pair"], r["attrs"]["data-path"]):
             (r["cells"], r["attrs"].get("class")) for r in p.rows
             if "data-ord" in r["attrs"] and "data-path" in r["attrs"]}
    injected_ord = str(scalar(db, "SELECT ord FROM run_code WHERE run = 5"))
    c_ord = str(scalar(db, "SELECT ord FROM run_code WHERE run = 7"))
    check(len(ords) == 4, f"codes: A, B, B's injected run, C: {ords}")
    cells, cls = drift[(injected_ord, "ref:exact", "forward")]
    faults = scalar(db, "SELECT count(*) FROM results WHERE run = 5 AND engine = 'ref' AND "
                        "output = 'output' AND elements > 3")  # element 3 exists: moved
    check(int(cells["bits_changed"]) == faults and cls == "changed",
          f"drift at the injected run: {cells}, {cls}; {faults} faults")
    cells, cls = drift[(c_ord, "ref:exact", "forward")]
    check(int(cells["bits_changed"]) == 2 and int(cells["cases_changed"]) == 2 and
          cls == "changed", f"drift at C (case {drift_case} moved, {flaky_case} flaky): {cells}")
    b_ord = str(scalar(db, "SELECT ord FROM run_code WHERE run = 4"))
    cells, cls = drift[(b_ord, "ref:exact", "forward")]
    check(int(cells["bits_changed"]) == 0 and cls is None, f"drift at B: {cells}")
    marks = {(r["attrs"]["data-ord"], r["cells"]["case_id"]) for r in p.rows
             if "data-ord" in r["attrs"] and "prev_code" in r["cells"]}
    check((c_ord, str(drift_case)) in marks and (c_ord, str(flaky_case)) in marks,
          f"the changed cases are not marked at C: {marks}")
    # speed: F1 stepped up at B and stayed (flagged); F2's one slow point is not a step
    perf = [(r["attrs"]["data-shape"], r["cells"]["code"], r["cells"]["ms"],
             r["attrs"]["data-flag"]) for r in p.rows if "data-shape" in r["attrs"]]
    flagged = [x for x in perf if x[3]]
    check(flagged == [("F1", commit["b"][:12], "1.3000", "regression")],
          f"regression flags: {flagged} of {perf}")
    check(sorted(float(x[2]) for x in perf if x[0] == "F2") ==
          sorted(v for (v,) in query(db, "SELECT ms FROM perf WHERE shape = 'F2'")), f"{perf}")
    # the sweep: a row per SW- shape with ours / ceiling, and its plot
    swept = {r["attrs"]["data-sweep"]: r["cells"]["ratio"] for r in p.rows
             if "data-sweep" in r["attrs"]}
    check(swept == {s: f"{o / c:.3f}" for s, (o, c) in sweep.items()}, f"sweep: {swept}")
    check(any(a.get("id", "").startswith("sweep-plot-") for t, a in p.tags if t == "figure"),
          "the sweep has no plot")
    # flaky: case 4 at C
    flaky = [r["attrs"]["data-case"] for r in p.rows if "data-case" in r["attrs"]]
    check(flaky == [str(flaky_case)], f"flaky cases: {flaky}")
    # the campaign's page: both shards as one, complete
    expect(0, "report", "--db", db, "--run", "1", "--html", "r1.html")
    p1 = parse_page("r1.html")
    check_self_contained(p1)
    complete = [a for t, a in p1.tags if a.get("id") == "completeness"]
    check(complete and complete[0]["data-complete"] == "1" and
          {"run-1", "run-2"} <= set(p1.ids), f"the campaign: {complete}, {sorted(p1.ids)[:9]}")
    # the text report: the same drift and speed sections; --since
    out, _ = expect(0, "report", "--db", db, "--run", "5")
    check("numeric drift across commits" in out and "regression" in out and
          "campaign" not in out.split("summary")[0], out)
    out, _ = expect(0, "report", "--db", db, "--since", "cccc")
    check(commit["b"][:12] not in out.split("numeric drift across commits")[1], out)
    for args, words in ((["--since", "dddd"], "no run"), (["--since", "xyz"], "bad value"),
                        (["--html", "nodir/x.html"], "cannot write")):
        _, err = expect(2, "report", "--db", db, *args)
        check(words in err, f"{args}: {err}")
    # what a person sees: headless Chromium's screenshot, where Chromium is installed
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("chromium not installed: no screenshot taken (the rest passed)")
        return
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1280,3000",
                        f"--screenshot={os.path.abspath('r5.png')}",
                        "file://" + os.path.abspath("r5.html")], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 0 and os.path.getsize("r5.png") > 10000, f"chromium: {r.stderr}")
    import matplotlib.image
    img = matplotlib.image.imread("r5.png")
    check(img.std() > 0.05, "the screenshot is blank")
    print(f"screenshot: {os.path.abspath('r5.png')}")

def main():
    global TB, SRC, CUDA
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tbecheck", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--cuda", choices=["on", "option-off", "no-compiler"],
                    help="how the build configured CUDA (test_version checks --version says so)")
    ap.add_argument("test")
    a = ap.parse_args()
    TB, SRC, CUDA = os.path.abspath(a.tbecheck), os.path.abspath(a.source), a.cuda
    fn = globals().get("test_" + a.test)
    if not fn:
        print(f"no test '{a.test}'")
        return 2
    d = os.path.join(os.path.abspath(a.work), a.test)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    os.chdir(d)
    try:
        rc = fn()
    except Failed as e:
        print(f"FAIL {a.test}: {e}")
        return 1
    if rc == SKIP:
        return SKIP
    print(f"pass {a.test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
