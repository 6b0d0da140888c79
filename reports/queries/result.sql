-- result.sql: one result in full: the comparison, its case and the run that produced it.
-- Not its violations (violations.sql). Parameter :id (results.id). `tbecheck show` prints it.
SELECT r.id AS result, r.engine || ':' || r.baseline AS pair, r.path, r.output, r.metric,
       r.status, r.reason, r.elements, r.exact, r.violations, r.max_ulp, r.max_abs, r.max_rel,
       r.worst_bound_ratio, r.digest, r.ref_ms, r.gpu_ms, r.repeat,
       r.case_id AS "case", c.hash AS case_hash, c.canonical,
       r.run, ru.git_commit, ru.dirty, ru.host, ru.cpu, ru.gpu, ru.driver, ru.cuda,
       ru.tool_version, ru.started, ru.ended, ru.complete, ru.injected, ru.argv
FROM results r
JOIN cases c ON c.id = r.case_id
JOIN runs ru ON ru.id = r.run
WHERE r.id = :id;
