-- summary.sql: one run's outcome per engine pair and path: cases (x repeats), how many passed,
-- failed, errored, were skipped or unsupported, the worst ulp distance (bitwise checks) and the
-- worst error/bound ratio (bound_ratio checks). Not the drift against earlier runs (drift.sql).
-- A case counts once per run, pair and path, with the worst status of its outputs there.
-- Parameters :run (default: the last run), :campaign (1: every run of its campaign, the shards
-- merged; default 0). tbecheck prints it at the end of `run` and in `report`.
WITH per_case AS (
  SELECT engine || ':' || baseline AS pair, path, run, case_id, repeat,
         max(CASE status WHEN 'pass' THEN 0 WHEN 'skip' THEN 1 WHEN 'unsupported' THEN 2
                         WHEN 'fail' THEN 3 ELSE 4 END) AS worst,
         max(CASE WHEN metric = 'bitwise' THEN max_ulp END) AS ulp,
         max(CASE WHEN metric = 'bound_ratio' THEN worst_bound_ratio END) AS ratio
  FROM results
  WHERE run IN (SELECT id FROM runs
                WHERE id = coalesce(:run, (SELECT id FROM last_run))
                   OR (coalesce(:campaign, 0) = 1 AND campaign = (
                         SELECT campaign FROM runs WHERE id = coalesce(:run, (SELECT id FROM last_run)))))
  GROUP BY pair, path, run, case_id, repeat
)
SELECT pair, path, count(*) AS cases, sum(worst = 0) AS pass, sum(worst = 3) AS fail,
       sum(worst = 4) AS error, sum(worst = 1) AS skip, sum(worst = 2) AS unsupported,
       coalesce(max(ulp), '-') AS worst_ulp,
       iif(max(ratio) IS NULL, '-', printf('%.3e', max(ratio))) AS worst_ratio
FROM per_case
GROUP BY pair, path
ORDER BY CASE substr(pair, 1, instr(pair, ':') - 1) WHEN 'ref' THEN 0 WHEN 'gpu' THEN 1 ELSE 2 END,
         pair, path;
