-- case_drift.sql: one case's metrics in every run that ran it, oldest first, with the commit:
-- how its bits, ulp distance and error/bound ratio moved across commits. Not a whole run's
-- drift (drift.sql).
-- Parameter :case: the case id, its hash, or its canonical text; fault-injected runs
-- (runs.injected) are left out unless :injected = 1.
SELECT ru.started, substr(ru.git_commit, 1, 12) AS git_commit, ru.dirty, r.run,
       r.engine || ':' || r.baseline AS pair, r.path, r.output, r.repeat, r.status, r.max_ulp,
       iif(r.worst_bound_ratio IS NULL, NULL, printf('%.3e', r.worst_bound_ratio)) AS ratio,
       r.digest, r.ref_ms, r.gpu_ms
FROM results r
JOIN runs ru ON ru.id = r.run
JOIN cases c ON c.id = r.case_id
WHERE (c.id = :case OR c.hash = :case OR c.canonical = :case)
  AND (ru.injected = 0 OR coalesce(:injected, 0) = 1)
ORDER BY pair, r.output, ru.started, r.run, r.repeat;
