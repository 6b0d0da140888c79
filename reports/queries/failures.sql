-- failures.sql: the failed and errored results of one run, with their reason and case; with
-- :all = 1 every result of the run. Not the per-path totals (summary.sql).
-- Parameters :run (default: the last run), :all (default 0), :campaign (1: every run of its
-- campaign; default 0). `tbecheck list` prints it.
SELECT r.id AS result, r.run, r.case_id AS "case", r.repeat, r.engine || ':' || r.baseline AS pair,
       r.path, r.output, r.status, r.violations, r.elements, r.max_ulp,
       iif(r.worst_bound_ratio IS NULL, NULL, printf('%.3e', r.worst_bound_ratio)) AS ratio,
       r.reason, c.canonical
FROM results r
JOIN cases c ON c.id = r.case_id
WHERE r.run IN (SELECT id FROM runs
              WHERE id = coalesce(:run, (SELECT id FROM last_run))
                 OR (coalesce(:campaign, 0) = 1 AND campaign = (
                       SELECT campaign FROM runs WHERE id = coalesce(:run, (SELECT id FROM last_run)))))
  AND (coalesce(:all, 0) = 1 OR r.status IN ('fail', 'error'))
ORDER BY r.id;
