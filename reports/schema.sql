-- schema.sql: the tbecheck results database (SQLite): every table, column by column, with its
-- constraints, and the views the queries share. Not the queries themselves (reports/queries/).
--
-- tbecheck builds a new database from this file in one transaction (harness/store/db.c embeds it) and
-- marks it with PRAGMA application_id 0x54424543 ('TBEC') and meta.schema_version. A database
-- whose version is newer than the tool's, or that is not a tbecheck database, is refused and left
-- unchanged. Writers use WAL and one transaction per case, so a killed run keeps every case it
-- committed and shows as incomplete (runs.complete = 0, runs.ended NULL).
-- Any change to a table below raises schema_version (db.h: DB_SCHEMA_VERSION) and adds its step
-- to upgrade.sql; a new column goes last in its table, where the upgrade's ALTER TABLE puts it
-- (merge copies rows with SELECT *). The views live in views.sql, which every creation and
-- upgrade (re)runs.

PRAGMA application_id = 1413629251;

-- One row: which schema this file follows.
CREATE TABLE meta (
  one            INTEGER PRIMARY KEY CHECK (one = 1),     -- there is exactly one row
  schema_version INTEGER NOT NULL CHECK (schema_version >= 1),
  created        TEXT NOT NULL                            -- UTC, ISO 8601, when the file was made
);

-- One row per `tbecheck run` or `tbecheck import`: where, on what, and whether it finished.
CREATE TABLE runs (
  id           INTEGER PRIMARY KEY,
  uid          TEXT NOT NULL UNIQUE CHECK (length(uid) = 32),  -- random hex: names the run
                                                  -- across merged databases (merge skips a uid
                                                  -- it already holds)
  git_commit   TEXT CHECK (length(git_commit) = 40), -- HEAD of the source tree tbecheck was
                                                  -- built from, read when the run started;
                                                  -- NULL outside a git checkout
  dirty        INTEGER CHECK (dirty IN (0, 1)),   -- 1: tracked files differed from HEAD
  host         TEXT NOT NULL,                     -- hostname
  cpu          TEXT NOT NULL,                     -- CPU model name
  gpu          TEXT,                              -- "name (sm_XY, N MiB)"; NULL: no usable GPU
  driver       TEXT,                              -- NVIDIA kernel driver version; NULL: none
  cuda         TEXT,                              -- CUDA toolkit tbecheck was built with; NULL:
                                                  -- built without CUDA
  tool_version TEXT NOT NULL,                     -- tbecheck's version
  argv         TEXT NOT NULL,                     -- the command line, shell-quoted
  engines      TEXT NOT NULL,                     -- engines asked for, e.g. 'ref,gpu,oracle'
  shard        TEXT CHECK (shard GLOB '[1-9]*/[1-9]*'), -- 'i/N' (1-based) or NULL: all cases
  repeats      INTEGER NOT NULL CHECK (repeats >= 1),   -- each case ran this many times
  started      TEXT NOT NULL,                     -- UTC, ISO 8601 with milliseconds
  ended        TEXT,                              -- NULL while running, or if it was killed
  complete     INTEGER NOT NULL DEFAULT 0 CHECK (complete IN (0, 1)), -- 1: every case ran
  injected     INTEGER NOT NULL DEFAULT 0 CHECK (injected IN (0, 1)), -- 1: run with
                                                  -- --inject-fault (testing the tester): never
                                                  -- the previous execution in drift, and left
                                                  -- out of flaky.sql, worst.sql, case_drift.sql
                                                  -- unless :injected = 1
  campaign     TEXT CHECK (length(campaign) BETWEEN 1 AND 64), -- the campaign the run belongs
                                                  -- to: shards of one campaign (run --shard,
                                                  -- --campaign) share it, and merge keeps it, so
                                                  -- the report shows them as one; NULL: the run
                                                  -- is a campaign of its own
  bench        TEXT CHECK (length(bench) > 0),    -- the benchmark program that recorded this run's
                                                  -- perf rows (bench/bench_db.h); NULL: a check
                                                  -- run (run, import, fuzz), whose last one is the
                                                  -- queries' default run
  engine_versions TEXT CHECK (length(engine_versions) > 0), -- what each external engine said
                                                  -- it runs, 'ext.fbgemm: order fbgemm_cpu,
                                                  -- fbgemm_gpu 1.8.0, torch 2.13.0; ...'; NULL:
                                                  -- no external engine ran
  gpu_uuid     TEXT CHECK (length(gpu_uuid) > 0), -- the UUID of the GPU the run had ('GPU-...',
                                                  -- run --gpus: a result traced to a device);
                                                  -- NULL: not known
  CHECK (complete = 0 OR ended IS NOT NULL)
);

-- One row per distinct case: its canonical text is its identity (the argument to replay).
CREATE TABLE cases (
  id        INTEGER PRIMARY KEY,
  canonical TEXT NOT NULL UNIQUE CHECK (length(canonical) > 0), -- case_format's text; an
                                                  -- imported batch: 'import digest=... ...'
  hash      TEXT NOT NULL UNIQUE CHECK (length(hash) = 16)      -- FNV-1a 64 of canonical, hex
);

-- One row per (run, case, repeat, engine pair, output): one named output of one engine
-- compared with its baseline by one named metric (harness/check/compare.h).
CREATE TABLE results (
  id                INTEGER PRIMARY KEY,
  run               INTEGER NOT NULL REFERENCES runs (id),
  case_id           INTEGER NOT NULL REFERENCES cases (id),
  repeat            INTEGER NOT NULL CHECK (repeat >= 0),  -- 0 .. runs.repeats - 1
  -- what ran: one of ours, or an external engine (ext.NAME; upgrade.sql's step 5 -> 6 writes
  -- this CHECK's text as it stands here, on one line)
  engine            TEXT NOT NULL CHECK (engine IN ('ref', 'gpu', 'oracle') OR (engine GLOB 'ext.?*' AND engine NOT GLOB 'ext.*[^a-z0-9_]*')),
  baseline          TEXT NOT NULL CHECK (baseline IN ('ref', 'model', 'exact')), -- what it is
                                                  -- held to: the reference's bits, the bits of
                                                  -- the path's model (forward.small), or the
                                                  -- exact value within the derived bound
  path              TEXT NOT NULL CHECK (length(path) > 0), -- how the engine computed it:
                                                  -- 'forward', 'forward.small', 'bounds', ...
  output            TEXT NOT NULL CHECK (length(output) > 0), -- 'output', 'indices',
                                                  -- 'offsets', 'warnings', 'offender', ...
  metric            TEXT NOT NULL CHECK (metric IN ('bitwise', 'bound_ratio')),
  status            TEXT NOT NULL
                    CHECK (status IN ('pass', 'fail', 'error', 'skip', 'unsupported')),
  reason            TEXT,                         -- why it is not a pass; NULL for a pass
  elements          INTEGER CHECK (elements >= 0),  -- compared elements; NULL: not compared
  exact             INTEGER CHECK (exact BETWEEN 0 AND elements),   -- bit-identical elements
  max_ulp           INTEGER CHECK (max_ulp >= 0), -- bitwise: largest ulp distance (integers:
                                                  -- largest difference)
  max_abs           REAL CHECK (max_abs >= 0),    -- largest |got - expected|
  max_rel           REAL CHECK (max_rel >= 0),    -- largest |got - expected| / |expected|
  worst_bound_ratio REAL CHECK (worst_bound_ratio >= 0), -- bound_ratio: max |got - exact| /
                                                  -- bound; above 1 is a violation
  violations        INTEGER CHECK (violations BETWEEN 0 AND elements), -- elements that failed
  digest            TEXT CHECK (length(digest) = 16), -- FNV-1a 64 of the engine's output
                                                  -- bytes: equal digests, equal bits
  ref_ms            REAL CHECK (ref_ms >= 0),     -- reference bounds check + forward, this case
  gpu_ms            REAL CHECK (gpu_ms >= 0),     -- GPU bounds check + forward (CUDA events)
  CHECK ((status = 'pass') = (reason IS NULL)),
  CHECK (status <> 'pass' OR (elements IS NOT NULL AND violations = 0)),
  UNIQUE (run, case_id, repeat, engine, baseline, output)
);
CREATE INDEX results_case ON results (case_id, engine, baseline, output);

-- The first violations of a failed result (at most --max-violations per result), where they
-- are and by how much. NULL in expected or got stands for NaN.
CREATE TABLE violations (
  id          INTEGER PRIMARY KEY,
  result      INTEGER NOT NULL REFERENCES results (id),
  element     INTEGER NOT NULL CHECK (element >= 0), -- index into the output
  coordinates TEXT NOT NULL,                      -- 't=1 b=3 d=17', 'p=42', 'bag=7', ...
  expected    REAL,                               -- baseline's value (exact value for
                                                  -- bound_ratio)
  got         REAL,                               -- the engine's value
  bound       REAL NOT NULL CHECK (bound >= 0)    -- 0 for bitwise
);
CREATE INDEX violations_result ON violations (result);

-- Timings of the engines per case (a check run's), and a benchmark's figures (a bench run's:
-- shape set), with the bytes moved by declaration (lookups * D * weight bytes + output bytes),
-- so speed can be followed across commits (queries/perf_drift.sql).
CREATE TABLE perf (
  id      INTEGER PRIMARY KEY,
  run     INTEGER NOT NULL REFERENCES runs (id),
  case_id INTEGER NOT NULL REFERENCES cases (id),
  repeat  INTEGER NOT NULL CHECK (repeat >= 0),
  kernel  TEXT NOT NULL CHECK (length(kernel) > 0), -- engine:path, e.g. 'gpu:forward'
  ms      REAL NOT NULL CHECK (ms >= 0),
  bytes   INTEGER NOT NULL CHECK (bytes >= 0),
  gbps    REAL CHECK (gbps >= 0),                 -- bytes / ms / 1e6; NULL when ms is 0
  shape   TEXT CHECK (length(shape) > 0),         -- a benchmark's name for the shape timed
                                                  -- ('F1'; its case is case_id); NULL: a check
                                                  -- run's timing of one case
  config  TEXT CHECK (length(config) > 0),        -- the configuration timed ('bags=2 width=8');
                                                  -- NULL: the engine's own choice
  ceiling_gbps REAL CHECK (ceiling_gbps >= 0)     -- the copy ceiling measured in the same run;
                                                  -- NULL: not measured
);
CREATE INDEX perf_run ON perf (run);

-- One row per case of a `tbecheck race` run: the GPU backward of one session launched again and
-- again under varying schedules (bwd.grid, bwd.order, bwd.noise, bwd.delay, bwd.steal), each
-- launch's bits compared with the reference's. A mismatch is also a failed results row (path
-- 'backward.race').
CREATE TABLE races (
  id                INTEGER PRIMARY KEY,
  run               INTEGER NOT NULL REFERENCES runs (id),
  case_id           INTEGER NOT NULL REFERENCES cases (id),
  repeat            INTEGER NOT NULL CHECK (repeat >= 0),   -- the case's how-many-th race in
                                                  -- the run (0 unless listed twice)
  launches          INTEGER NOT NULL CHECK (launches >= 1), -- backward launches compared
  distinct_outcomes INTEGER NOT NULL CHECK (distinct_outcomes BETWEEN 1 AND launches), --
                                                  -- distinct hashes of weights, momentum and
                                                  -- psw_grad over the launches (1: every launch
                                                  -- gave the same bits)
  mismatches        INTEGER NOT NULL CHECK (mismatches BETWEEN 0 AND launches), -- launches
                                                  -- whose bits differ from the reference's
  long_runs         INTEGER NOT NULL CHECK (long_runs >= 0), -- long runs of the case (GPU's
                                                  -- count, first launch)
  chunks            INTEGER NOT NULL CHECK (chunks >= 0),    -- their chunk programs
  variants          TEXT NOT NULL CHECK (length(variants) > 0), -- the schedule of each launch,
                                                  -- in order: 'grid=0 order=asc noise=0
                                                  -- delay=0; ...' (grid 0: the policy)
  UNIQUE (run, case_id, repeat)
);

INSERT INTO meta (one, schema_version, created)
VALUES (1, 6, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
