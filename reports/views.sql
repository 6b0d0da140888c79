-- views.sql: the views the queries share (reports/queries/). Not the tables (schema.sql).
--
-- harness/db.c runs this file after creating a database from schema.sql and after every upgrade
-- (upgrade.sql), so a view always matches the tables of this build; a view changes here without
-- a schema version.

DROP VIEW IF EXISTS last_run;
DROP VIEW IF EXISTS result_history;

-- The run started last: the queries' default when :run is not set.
CREATE VIEW last_run AS SELECT id FROM runs ORDER BY started DESC, id DESC LIMIT 1;

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
