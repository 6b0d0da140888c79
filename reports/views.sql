-- views.sql: the views the queries share (reports/queries/). Not the tables (schema.sql).
--
-- harness/store/db.c runs this file after creating a database from schema.sql and after every upgrade
-- (upgrade.sql), so a view always matches the tables of this build; a view changes here without
-- a schema version.

DROP VIEW IF EXISTS last_run;
DROP VIEW IF EXISTS result_history;
DROP VIEW IF EXISTS run_code;

-- The check run (not a benchmark's) started last: the queries' default when :run is not set.
CREATE VIEW last_run AS
SELECT id FROM runs WHERE bench IS NULL ORDER BY started DESC, id DESC LIMIT 1;

-- Every run with the code it ran and that code's place in commit order, the x axis of drift and
-- speed across commits. A clean commit is one code, whatever ran it; a dirty tree, an unknown
-- commit or a fault-injected run is a code of its own: its campaign's (the shards of one
-- command line), or else the run's. Codes are ordered by the first start of a run of theirs
-- (ord 1, 2, ...); label is what a plot prints.
CREATE VIEW run_code AS
WITH c AS (
  SELECT id AS run, git_commit, dirty, injected, started,
         CASE WHEN dirty = 0 AND injected = 0 THEN git_commit
              WHEN campaign IS NOT NULL THEN 'campaign ' || campaign
              ELSE 'run ' || id END AS code,
         coalesce(substr(git_commit, 1, 12), 'no commit')
           || CASE WHEN dirty = 0 OR git_commit IS NULL THEN '' ELSE '+dirty' END
           || CASE WHEN dirty = 0 AND injected = 0 THEN ''
                   WHEN campaign IS NOT NULL THEN ' campaign ' || substr(campaign, 1, 16)
                   ELSE ' run ' || id END
           || CASE WHEN injected = 1 THEN ' injected' ELSE '' END AS label
  FROM runs
), f AS (
  SELECT code, min(started) AS first FROM c GROUP BY code
)
SELECT c.run, c.code, c.label, c.git_commit, c.dirty, c.injected,
       dense_rank() OVER (ORDER BY f.first, f.code) AS ord
FROM c JOIN f ON f.code = c.code;

-- Every result with its case and run, and what changed since the previous execution of the same
-- (case, engine, baseline, output): the same run's previous repeat, or else the last repeat of
-- the latest earlier-started run that was not fault-injected (runs.injected: an injected run is
-- never another run's previous execution; its own results are compared as any run's).
-- change = 'new' (none before), 'status', 'bits' (digest), 'metrics' (ulp or ratio), 'same'.
CREATE VIEW result_history AS
SELECT h.*,
       p.run AS prev_run,
       pr.git_commit AS prev_commit,
       p.status AS prev_status,
       p.digest AS prev_digest,
       p.max_ulp AS prev_max_ulp,
       p.worst_bound_ratio AS prev_worst_bound_ratio,
       CASE
         WHEN p.id IS NULL THEN 'new'
         WHEN h.status <> p.status THEN 'status'
         WHEN h.digest IS NOT p.digest THEN 'bits'
         WHEN h.max_ulp IS NOT p.max_ulp
           OR h.worst_bound_ratio IS NOT p.worst_bound_ratio THEN 'metrics'
         ELSE 'same'
       END AS change
FROM (
  SELECT r.*, c.canonical, c.hash, ru.git_commit, ru.dirty, ru.started, ru.injected,
         r.engine || ':' || r.baseline AS pair,
         (SELECT y.id
          FROM results y
          JOIN runs yr ON yr.id = y.run
          WHERE y.case_id = r.case_id AND y.engine = r.engine AND y.baseline = r.baseline
            AND y.output = r.output AND (yr.injected = 0 OR y.run = r.run)
            AND (yr.started, y.run, y.repeat) < (ru.started, r.run, r.repeat)
          ORDER BY yr.started DESC, y.run DESC, y.repeat DESC
          LIMIT 1) AS prev_id
  FROM results r
  JOIN cases c ON c.id = r.case_id
  JOIN runs ru ON ru.id = r.run
) h
LEFT JOIN results p ON p.id = h.prev_id
LEFT JOIN runs pr ON pr.id = p.run;
