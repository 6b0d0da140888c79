#!/usr/bin/env python3
"""slurm_test.py: the slurm tier: a one-node Slurm cluster started here (munged, slurmctld,
slurmd from a generated slurm.conf) runs a campaign through scripts/slurm/submit.sh; not a test
of Slurm itself, nor of `--shard` alone (cli_test.py's merge test does that).

usage: slurm_test.py --tbecheck PATH --source DIR --work DIR
Checks: a 4-task CPU array plus its merge job holds exactly the results of one unsharded run
(same cases, statuses and digests) under one campaign id; a task cancelled mid-run (scancel)
keeps its finished cases, its run is marked incomplete and the merge says so. The daemons it
started are stopped by their process ids. Exit 0 pass, 1 fail, 77 skip (no Slurm or munge
here, or not root: slurmd launches jobs as root).
"""

import argparse
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

SKIP = 77
ENV = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS="1")


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(*args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, **kw)
    return r.returncode, r.stdout, r.stderr


def query(db, sql):
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as d:
        return d.execute(sql).fetchall()


class Cluster:
    """munged + slurmctld + slurmd on this host, everything under one directory."""

    def __init__(self, work):
        self.dir = work  # the daemons' state, configuration, logs and munge socket
        self.pids = []
        host = socket.gethostname().split(".")[0]
        os.makedirs(f"{work}/state")
        os.makedirs(f"{work}/spool")
        os.makedirs(f"{work}/munge", mode=0o700)
        with open(f"{work}/munge/key", "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(f"{work}/munge/key", 0o400)
        self.conf = f"{work}/slurm.conf"
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=tbecheck
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={work}/munge/sock
CredType=cred/munge
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdLogFile={work}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        ENV["SLURM_CONF"] = self.conf

    def start(self):
        d = self.dir
        self.daemon(["munged", f"--key-file={d}/munge/key", f"--socket={d}/munge/sock",
                     f"--pid-file={d}/munge/pid", f"--log-file={d}/munge/log",
                     f"--seed-file={d}/munge/seed", "--force"], f"{d}/munge/pid")
        self.daemon(["slurmctld"], f"{d}/slurmctld.pid")
        self.daemon(["slurmd"], f"{d}/slurmd.pid")
        deadline = time.time() + 60
        while time.time() < deadline:
            rc, out, _ = sh("sinfo", "-h", "-o", "%t")
            if rc == 0 and out.strip() == "idle":
                return
            time.sleep(0.5)
        raise Failed(f"the node never became idle: {sh('sinfo')[1]}\n{self.logs()}")

    def daemon(self, argv, pidfile):
        rc, out, err = sh(*argv)
        check(rc == 0, f"{argv[0]} did not start: {out}{err}")
        # A daemon creates its pid file before it writes the number and its newline into it,
        # so the test waits for a whole line, not for the file.
        deadline = time.time() + 20
        text = ""
        while time.time() < deadline:
            if os.path.exists(pidfile):
                with open(pidfile) as f:
                    text = f.read()
                if text.endswith("\n"):
                    break
            time.sleep(0.1)
        check(text.endswith("\n") and text.strip().isdigit(),
              f"{argv[0]} wrote no whole pid line into {pidfile} within 20 s: {text!r}")
        self.pids.append((argv[0], int(text)))

    def stop(self):
        """Stops the daemons this test started, newest first, by their process ids."""
        for name, pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
        self.pids = []

    def logs(self):
        text = []
        for name in ("slurmctld.log", "slurmd.log"):
            try:
                with open(f"{self.dir}/{name}") as f:
                    text.append(f"--- {name}\n" + "".join(f.readlines()[-20:]))
            except OSError:
                pass
        return "\n".join(text)


def wait_job(job, seconds):
    """Waits until Slurm no longer lists job (all of an array's tasks)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        rc, out, _ = sh("squeue", "-h", "-j", job)
        if rc != 0 or not out.strip():
            return
        time.sleep(0.5)
    raise Failed(f"job {job} still queued or running after {seconds} s: {sh('squeue')[1]}")


def submit(source, tb, camp, tasks, cases):
    rc, out, err = sh(f"{source}/scripts/slurm/submit.sh", "--tasks", str(tasks),
                      "--gpus-per-task", "0", "--engines", "ref", "--dir", camp,
                      "--tbecheck", tb, cases)
    check(rc == 0, f"submit.sh: exit {rc}\n{out}{err}")
    m = re.match(r"array (\d+) \(\d+ tasks\), merge (\d+):", out)
    check(m, f"submit.sh printed no job ids: {out}")
    return m.group(1), m.group(2)


DIGESTS = ("SELECT c.canonical, r.engine, r.baseline, r.output, r.status, r.digest "
           "FROM results r JOIN cases c ON c.id = r.case_id ORDER BY 1, 2, 3, 4")


def test_campaign(source, tb, work):
    with open(f"{work}/random.cases", "w") as f:
        rc, out, err = sh(tb, "random", "24", "11")
        check(rc == 0, f"tbecheck random: {err}")
        f.write(out)
    rc, out, err = sh(tb, "run", "--engines", "ref", "--db", f"{work}/whole.db",
                      f"{work}/random.cases")
    check(rc in (0, 1), f"the unsharded run: exit {rc}\n{err}")
    array, merge = submit(source, tb, f"{work}/camp", 4, f"{work}/random.cases")
    wait_job(merge, 300)
    with open(f"{work}/camp/merge.out") as f:
        merged = f.read()
    camp = f"{work}/camp/campaign.db"
    check(os.path.exists(camp), f"no merged database; merge.out:\n{merged}")
    check(query(camp, DIGESTS) == query(f"{work}/whole.db", DIGESTS),
          "the merged shards differ from one unsharded run of the same cases")
    shards = query(camp, "SELECT shard, complete, campaign FROM runs ORDER BY shard")
    check([s for s, _, _ in shards] == ["1/4", "2/4", "3/4", "4/4"], f"shards: {shards}")
    check(all(c == 1 for _, c, _ in shards), f"a shard is incomplete: {shards}")
    check(len({k for _, _, k in shards}) == 1 and shards[0][2], f"campaign ids: {shards}")
    check(os.path.exists(f"{work}/camp/report.html"), f"no report.html; merge.out:\n{merged}")


def test_cancel(source, tb, work):
    """Shard 2 of 2 gets a slow case first and is cancelled once its first case is stored."""
    quick = "B=4 E=100 D=8 L=4 seed={}"
    slow = "T=2 B=20000 E=100000 D=256 L=64 seed=3"
    lines = [quick.format(1), quick.format(2), quick.format(3), slow, quick.format(5), slow]
    with open(f"{work}/cancel.cases", "w") as f:
        f.write("\n".join(lines) + "\n")
    array, merge = submit(source, tb, f"{work}/cancel", 2, f"{work}/cancel.cases")
    shard = f"{work}/cancel/shard-2.db"
    deadline = time.time() + 120
    stored = 0
    while time.time() < deadline and not stored:
        try:
            stored = query(shard, "SELECT count(DISTINCT case_id) FROM results")[0][0]
        except sqlite3.Error:
            pass
        time.sleep(0.2)
    check(stored, "shard 2 stored no case within 120 s")
    rc, out, err = sh("scancel", f"{array}_2")
    check(rc == 0, f"scancel: {out}{err}")
    wait_job(merge, 300)
    with open(f"{work}/cancel/merge.out") as f:
        merged = f.read()
    camp = f"{work}/cancel/campaign.db"
    runs = query(camp, "SELECT shard, complete FROM runs ORDER BY shard")
    check(runs == [("1/2", 1), ("2/2", 0)], f"runs after the cancel: {runs}\n{merged}")
    kept = query(camp, "SELECT count(DISTINCT r.case_id) FROM results r JOIN runs u "
                       "ON u.id = r.run WHERE u.shard = '2/2'")[0][0]
    check(kept >= 1, "the cancelled shard's finished cases were lost")
    check("incomplete" in merged, f"the merge did not say a shard is incomplete:\n{merged}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tbecheck", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    missing = [t for t in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")
               if not shutil.which(t)]
    if missing:
        print(f"SKIP: not installed here: {' '.join(missing)} (Debian: slurm-wlm munge)")
        return SKIP
    if os.geteuid() != 0:
        print("SKIP: slurmd launches jobs as root; this test is not root")
        return SKIP
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    # the daemons' files under a short path: a unix socket's path has at most 107 bytes
    state = tempfile.mkdtemp(prefix="tbe-slurm-")
    cluster = Cluster(state)
    try:
        cluster.start()
        for t in (test_campaign, test_cancel):
            os.makedirs(f"{a.work}/{t.__name__}")
            t(a.source, os.path.abspath(a.tbecheck), f"{a.work}/{t.__name__}")
            print(f"{t.__name__}: ok")
    except Failed as e:
        print(f"FAIL: {e}\n{cluster.logs()}")
        return 1
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
