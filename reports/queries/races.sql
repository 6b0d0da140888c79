-- races.sql: the raced cases of one run (`tbecheck race`): how often the GPU backward was
-- launched, how many distinct outcomes its bits had, how many launches differ from the
-- reference, and the long runs and chunk programs raced. Not the results rows: a mismatch is
-- also a failure there (failures.sql). Parameter :run (default: the last run). `tbecheck
-- report` prints it for a run that raced.
SELECT ra.run, ra.case_id AS "case", ra.repeat, ra.launches, ra.distinct_outcomes AS outcomes,
       ra.mismatches, ra.long_runs, ra.chunks, c.canonical
FROM races ra
JOIN cases c ON c.id = ra.case_id
WHERE ra.run = coalesce(:run, (SELECT id FROM last_run))
ORDER BY ra.id;
