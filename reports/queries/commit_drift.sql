-- commit_drift.sql: numeric drift across commits: per engine pair and path, and per code in
-- commit order (views.sql run_code: a clean commit, or a dirty, commit-less or fault-injected
-- run), the worst error/bound ratio, the worst ulp of the bitwise checks, and how many outputs
-- came out with other bits than at their previous execution (result_history), in how many
-- cases. Not one run against the previous execution (drift.sql) nor one case (case_drift.sql).
-- Parameter :since (a commit or a prefix of one: from its first code on; default: every code).
-- `tbecheck report` prints it; the HTML report plots it.
WITH since AS (
  SELECT coalesce(min(ord), 1) AS ord FROM run_code
  WHERE :since IS NULL OR git_commit LIKE :since || '%'
)
SELECT rc.ord, rc.label AS code, h.pair, h.path, count(*) AS results,
       count(DISTINCT h.case_id) AS cases,
       max(CASE WHEN h.metric = 'bitwise' THEN h.max_ulp END) AS worst_ulp,
       iif(max(h.worst_bound_ratio) IS NULL, '-', printf('%.3e', max(h.worst_bound_ratio)))
         AS worst_ratio,
       count(CASE WHEN h.digest <> h.prev_digest THEN 1 END) AS bits_changed,
       count(DISTINCT CASE WHEN h.digest <> h.prev_digest THEN h.case_id END) AS cases_changed,
       count(CASE WHEN h.change = 'status' THEN 1 END) AS status_changed
FROM result_history h
JOIN run_code rc ON rc.run = h.run
WHERE rc.ord >= (SELECT ord FROM since)
GROUP BY h.pair, h.path, rc.ord
ORDER BY CASE substr(h.pair, 1, instr(h.pair, ':') - 1) WHEN 'ref' THEN 0 WHEN 'gpu' THEN 1
         ELSE 2 END, h.pair, h.path, rc.ord;
