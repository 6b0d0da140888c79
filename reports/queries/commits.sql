-- commits.sql: the codes the database holds, in commit order (views.sql run_code: a clean
-- commit, or a dirty, commit-less or fault-injected run), with their runs and first start: the
-- x axis of drift and speed across commits. Not one run (run.sql).
-- Parameter :since (a commit or a prefix of one): from its first code on (default: every code);
-- `matches` is 1 on the codes of a commit that starts with :since (tbecheck report --since
-- checks there is exactly one such commit).
WITH since AS (
  SELECT coalesce(min(ord), 1) AS ord FROM run_code
  WHERE :since IS NULL OR git_commit LIKE :since || '%'
)
SELECT rc.ord, rc.label AS code, rc.git_commit, rc.dirty, count(*) AS runs,
       min(ru.started) AS first_started, max(rc.git_commit LIKE :since || '%') AS matches
FROM run_code rc
JOIN runs ru ON ru.id = rc.run
WHERE rc.ord >= (SELECT ord FROM since)
GROUP BY rc.ord
ORDER BY rc.ord;
