-- run.sql: one run's record: where and on what it ran, and whether it finished. Not its results
-- (summary.sql, failures.sql). Parameter :run (default: the last run). `tbecheck report` prints it.
SELECT id AS run, git_commit, dirty, host, cpu, gpu, gpu_uuid, driver, cuda, tool_version,
       engines, engine_versions, shard, repeats, started, ended, complete, injected, argv,
       (SELECT count(DISTINCT case_id) FROM results WHERE results.run = runs.id) AS cases,
       (SELECT count(*) FROM results WHERE results.run = runs.id) AS results
FROM runs
WHERE id = coalesce(:run, (SELECT id FROM last_run));
