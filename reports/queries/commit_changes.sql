-- commit_changes.sql: every output whose bits changed against its previous execution
-- (result_history: digests differ), with the code in commit order where it changed (run_code)
-- and the code it changed from: the marks on the drift across commits. Not the totals per code
-- (commit_drift.sql). Parameter :since (as commit_drift.sql). The HTML report lists them.
WITH since AS (
  SELECT coalesce(min(ord), 1) AS ord FROM run_code
  WHERE :since IS NULL OR git_commit LIKE :since || '%'
)
SELECT rc.ord, rc.label AS code, pc.label AS prev_code, h.id AS result, h.run, h.case_id,
       h.pair, h.path, h.output, h.prev_status || ' -> ' || h.status AS status,
       coalesce(h.prev_max_ulp, '-') || ' -> ' || coalesce(h.max_ulp, '-') AS ulp,
       iif(h.prev_worst_bound_ratio IS NULL, '-', printf('%.3e', h.prev_worst_bound_ratio))
         || ' -> ' || iif(h.worst_bound_ratio IS NULL, '-', printf('%.3e', h.worst_bound_ratio))
         AS ratio,
       h.canonical
FROM result_history h
JOIN run_code rc ON rc.run = h.run
JOIN run_code pc ON pc.run = h.prev_run
WHERE h.digest <> h.prev_digest AND rc.ord >= (SELECT ord FROM since)
ORDER BY rc.ord, h.case_id, h.pair, h.output, h.repeat;
