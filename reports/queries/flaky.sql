-- flaky.sql: outputs that came out with different bits for the same case and the same code:
-- across the repeats of one run, or across runs of one clean (not dirty) commit. Not drift
-- across commits (case_drift.sql). Fault-injected runs (runs.injected) are left out unless
-- :injected = 1.
SELECT r.case_id AS "case", r.engine || ':' || r.baseline AS pair, r.output,
       CASE WHEN ru.dirty = 0 THEN 'commit ' || substr(ru.git_commit, 1, 12)
            ELSE 'run ' || r.run END AS same_code,
       count(DISTINCT r.digest) AS distinct_bits, count(*) AS results,
       group_concat(DISTINCT r.run) AS runs, c.canonical
FROM results r
JOIN runs ru ON ru.id = r.run
JOIN cases c ON c.id = r.case_id
WHERE r.digest IS NOT NULL AND (ru.injected = 0 OR coalesce(:injected, 0) = 1)
GROUP BY r.case_id, r.engine, r.baseline, r.output,
         CASE WHEN ru.dirty = 0 THEN ru.git_commit ELSE r.run END
HAVING count(DISTINCT r.digest) > 1
ORDER BY r.case_id, pair, r.output;
