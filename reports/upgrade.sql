-- upgrade.sql: brings a database of an older schema version to the current one, one step per
-- version, inside the transaction harness/store/db.c opens. Not the schema (schema.sql) nor a query.
--
-- Each step starts with a line '-- V -> V+1: why'. db.c runs, in one transaction, the steps from
-- the database's version on (from the line '-- V -> ' of its version to the end), then
-- views.sql. A later version adds its step at the end; its new columns go last in their tables,
-- as schema.sql lists them.

-- 1 -> 2: runs.injected. Runs before it recorded --inject-fault only in their arguments.
ALTER TABLE runs ADD COLUMN injected INTEGER NOT NULL DEFAULT 0 CHECK (injected IN (0, 1));
UPDATE runs SET injected = 1 WHERE instr(argv, '--inject-fault') > 0;
UPDATE meta SET schema_version = 2;

-- 2 -> 3: runs.campaign (shards of one campaign), runs.bench and perf's benchmark columns.
-- Earlier shards each stay a campaign of their own: nothing recorded which belonged together.
ALTER TABLE runs ADD COLUMN campaign TEXT CHECK (length(campaign) BETWEEN 1 AND 64);
ALTER TABLE runs ADD COLUMN bench TEXT CHECK (length(bench) > 0);
ALTER TABLE perf ADD COLUMN shape TEXT CHECK (length(shape) > 0);
ALTER TABLE perf ADD COLUMN config TEXT CHECK (length(config) > 0);
ALTER TABLE perf ADD COLUMN ceiling_gbps REAL CHECK (ceiling_gbps >= 0);
UPDATE meta SET schema_version = 3;

-- 3 -> 4: results.baseline takes 'model' (the small-table path held to the tensor-core model's
-- bits); harness/store/db.c widens that CHECK before these steps run, this step records it.
UPDATE meta SET schema_version = 4;

-- 4 -> 5: races, the outcomes of `tbecheck race` (schema.sql says what each column holds).
-- Earlier runs raced nothing, so the table starts empty.
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
UPDATE meta SET schema_version = 5;

-- 5 -> 6: results.engine takes external engines ('ext.NAME', harness/check/engine_ext.h);
-- harness/store/db.c widens that CHECK before these steps run. runs.engine_versions: what they
-- said they run (earlier runs ran none).
ALTER TABLE runs ADD COLUMN engine_versions TEXT CHECK (length(engine_versions) > 0);
-- runs.gpu_uuid: the GPU of a run --gpus worker (earlier runs did not record it).
ALTER TABLE runs ADD COLUMN gpu_uuid TEXT CHECK (length(gpu_uuid) > 0);
UPDATE meta SET schema_version = 6;
