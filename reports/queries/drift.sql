-- drift.sql: every result of one run beside the previous execution of the same case, engine
-- pair and output (an earlier repeat, or else the latest earlier run not fault-injected), and
-- what changed (result_history.change: new, status, bits, metrics, same). Not one case across
-- commits (case_drift.sql).
-- Parameter :run (default: the last run). `tbecheck report` prints the totals per change and the
-- rows that changed.
SELECT case_id, repeat, pair, path, output, change,
       prev_run, substr(prev_commit, 1, 12) AS prev_commit,
       coalesce(prev_status, '-') || ' -> ' || status AS status,
       coalesce(prev_max_ulp, '-') || ' -> ' || coalesce(max_ulp, '-') AS ulp,
       iif(prev_worst_bound_ratio IS NULL, '-', printf('%.3e', prev_worst_bound_ratio))
         || ' -> ' || iif(worst_bound_ratio IS NULL, '-', printf('%.3e', worst_bound_ratio))
         AS ratio,
       canonical
FROM result_history
WHERE run = coalesce(:run, (SELECT id FROM last_run))
ORDER BY change = 'same', change = 'new', case_id, pair, output, repeat;
