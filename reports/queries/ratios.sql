-- ratios.sql: every compared result of one run (or its campaign) with its metric, elements,
-- bit-exact elements and worst error/bound ratio: what the HTML report's histograms of the
-- ratio per bound-checked path and bit-exact fractions per bitwise path are drawn from. Not the
-- totals per path (summary.sql). Parameters :run (default: the last run), :campaign (as
-- summary.sql).
SELECT r.id AS result, r.run, r.case_id, r.engine || ':' || r.baseline AS pair, r.path,
       r.output, r.metric, r.status, r.elements, r.exact, r.max_ulp, r.worst_bound_ratio
FROM results r
WHERE r.elements IS NOT NULL
  AND r.run IN (SELECT id FROM runs
                WHERE id = coalesce(:run, (SELECT id FROM last_run))
                   OR (coalesce(:campaign, 0) = 1 AND campaign = (
                         SELECT campaign FROM runs WHERE id = coalesce(:run, (SELECT id FROM last_run)))))
ORDER BY pair, r.path, r.id;
