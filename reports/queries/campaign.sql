-- campaign.sql: the runs of one run's campaign (runs.campaign: the shards of `run --shard`,
-- merged), each with where and on what it ran and whether it finished; the run alone when it
-- has no campaign. Not one run's record (run.sql) nor its results (summary.sql).
-- Parameter :run (default: the last run). `tbecheck report` prints it.
SELECT id AS run, campaign, shard, git_commit, dirty, host, cpu, gpu, gpu_uuid, driver, cuda,
       tool_version, engines, engine_versions, repeats, started, ended, complete, injected,
       bench, argv,
       (SELECT count(DISTINCT case_id) FROM results WHERE results.run = runs.id) AS cases,
       (SELECT count(*) FROM results WHERE results.run = runs.id) AS results
FROM runs
WHERE id = coalesce(:run, (SELECT id FROM last_run))
   OR campaign = (SELECT campaign FROM runs WHERE id = coalesce(:run, (SELECT id FROM last_run)))
ORDER BY shard IS NULL, CAST(shard AS INTEGER), started, id;
