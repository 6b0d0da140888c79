-- merge.sql: copies the runs of the attached database `src` that main does not hold (by uid),
-- with their results, violations, timings and races, renumbered after main's ids. Not a query.
--
-- harness/store/db.c runs it inside one transaction after checking that src has main's schema
-- version (so SELECT * lists the same columns in the same order), then reads
-- count(*) FROM temp.m_runs and drops the temp.m_* tables. Cases are matched by canonical text.

INSERT OR IGNORE INTO main.cases (canonical, hash) SELECT canonical, hash FROM src.cases;

CREATE TEMP TABLE m_runs AS
  SELECT * FROM src.runs WHERE uid NOT IN (SELECT uid FROM main.runs);
CREATE TEMP TABLE m_results AS
  SELECT * FROM src.results WHERE run IN (SELECT id FROM temp.m_runs);
CREATE TEMP TABLE m_violations AS
  SELECT * FROM src.violations WHERE result IN (SELECT id FROM temp.m_results);
CREATE TEMP TABLE m_perf AS
  SELECT * FROM src.perf WHERE run IN (SELECT id FROM temp.m_runs);
CREATE TEMP TABLE m_races AS
  SELECT * FROM src.races WHERE run IN (SELECT id FROM temp.m_runs);

-- case ids of main, through the canonical text
UPDATE temp.m_results SET case_id = (
  SELECT mc.id FROM main.cases mc JOIN src.cases sc ON sc.canonical = mc.canonical
  WHERE sc.id = temp.m_results.case_id);
UPDATE temp.m_perf SET case_id = (
  SELECT mc.id FROM main.cases mc JOIN src.cases sc ON sc.canonical = mc.canonical
  WHERE sc.id = temp.m_perf.case_id);
UPDATE temp.m_races SET case_id = (
  SELECT mc.id FROM main.cases mc JOIN src.cases sc ON sc.canonical = mc.canonical
  WHERE sc.id = temp.m_races.case_id);

-- fresh ids after main's largest (computed before anything is inserted)
UPDATE temp.m_violations SET
  id = id + (SELECT coalesce(max(id), 0) FROM main.violations),
  result = result + (SELECT coalesce(max(id), 0) FROM main.results);
UPDATE temp.m_perf SET
  id = id + (SELECT coalesce(max(id), 0) FROM main.perf),
  run = run + (SELECT coalesce(max(id), 0) FROM main.runs);
UPDATE temp.m_races SET
  id = id + (SELECT coalesce(max(id), 0) FROM main.races),
  run = run + (SELECT coalesce(max(id), 0) FROM main.runs);
UPDATE temp.m_results SET
  id = id + (SELECT coalesce(max(id), 0) FROM main.results),
  run = run + (SELECT coalesce(max(id), 0) FROM main.runs);
UPDATE temp.m_runs SET id = id + (SELECT coalesce(max(id), 0) FROM main.runs);

INSERT INTO main.runs SELECT * FROM temp.m_runs;
INSERT INTO main.results SELECT * FROM temp.m_results;
INSERT INTO main.violations SELECT * FROM temp.m_violations;
INSERT INTO main.perf SELECT * FROM temp.m_perf;
INSERT INTO main.races SELECT * FROM temp.m_races;
