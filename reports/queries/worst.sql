-- worst.sql: the five worst cases of each engine pair and path over the whole database: largest
-- error/bound ratio first, then largest ulp distance, with the run that saw it. Not one run's
-- totals (summary.sql). Fault-injected runs (runs.injected) are left out unless :injected = 1.
WITH per_case AS (
  SELECT r.engine || ':' || r.baseline AS pair, r.path, r.case_id,
         max(coalesce(r.worst_bound_ratio, 0)) AS ratio, max(coalesce(r.max_ulp, 0)) AS ulp,
         max(r.run) AS last_run
  FROM results r
  JOIN runs ru ON ru.id = r.run
  WHERE r.elements IS NOT NULL AND (ru.injected = 0 OR coalesce(:injected, 0) = 1)
  GROUP BY pair, r.path, r.case_id
), ranked AS (
  SELECT *, row_number() OVER (PARTITION BY pair, path ORDER BY ratio DESC, ulp DESC, case_id)
              AS rank
  FROM per_case
)
SELECT pair, path, rank, case_id AS "case", printf('%.3e', ratio) AS worst_ratio,
       ulp AS worst_ulp, last_run, c.canonical
FROM ranked
JOIN cases c ON c.id = ranked.case_id
WHERE rank <= 5
ORDER BY pair, path, rank;
