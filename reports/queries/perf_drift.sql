-- perf_drift.sql: speed across commits: per benchmark shape, kernel (engine:path),
-- configuration and machine (GPU, or CPU without one), and per code in commit order (views.sql
-- run_code), the benchmark's time and GB/s beside the copy ceiling of the same run, flagged
-- where a step slowed it down. Not the correctness drift (commit_drift.sql); only benchmark
-- figures (perf.shape set, bench/bench_db.h), not a check run's per-case timings.
-- Parameter :since (a commit or a prefix of one: from its first code on; default: every code).
--
-- A code's time is the fastest of its figures (noise only adds time), ms_max the slowest. The
-- flag, after airspeed velocity's step detection, made simple: against the previous (up to) 5
-- codes of the series, whose fastest is base_ms and whose spread is their slowest minus their
-- fastest, a code is slow when its time exceeds their slowest by more than that spread (at
-- least 5% of base_ms, asv's default threshold). 'regression': slow, and so is the next code (a
-- step, not one noisy point); 'regression?': slow and the latest code, nothing after it yet
-- (time it again). `tbecheck report` prints it; the HTML report plots it.
WITH since AS (
  SELECT coalesce(min(ord), 1) AS ord FROM run_code
  WHERE :since IS NULL OR git_commit LIKE :since || '%'
), per AS (
  SELECT p.shape, p.kernel, coalesce(p.config, 'default') AS config,
         coalesce(ru.gpu, ru.cpu) AS machine, rc.ord, rc.label AS code, count(*) AS figures,
         min(p.ms) AS ms, max(p.ms) AS ms_max, max(p.gbps) AS gbps,
         max(p.ceiling_gbps) AS ceiling_gbps
  FROM perf p
  JOIN runs ru ON ru.id = p.run
  JOIN run_code rc ON rc.run = p.run
  WHERE p.shape IS NOT NULL AND rc.ord >= (SELECT ord FROM since)
  GROUP BY p.shape, p.kernel, config, machine, rc.ord
), win AS (
  SELECT per.*,
         min(ms) OVER prev AS base_ms, max(ms_max) OVER prev AS base_max,
         lead(ms) OVER (PARTITION BY shape, kernel, config, machine ORDER BY ord) AS next_ms
  FROM per
  WINDOW prev AS (PARTITION BY shape, kernel, config, machine ORDER BY ord
                  ROWS BETWEEN 5 PRECEDING AND 1 PRECEDING)
), judged AS (
  SELECT win.*, base_max + max(base_max - base_ms, 0.05 * base_ms) AS slow_ms FROM win
)
SELECT shape, kernel, config, machine, ord, code, figures, printf('%.4f', ms) AS ms,
       printf('%.4f', ms_max) AS ms_max, printf('%.1f', gbps) AS gbps,
       iif(ceiling_gbps IS NULL, '-', printf('%.1f', ceiling_gbps)) AS ceiling_gbps,
       iif(base_ms IS NULL, '-', printf('%.4f', base_ms)) AS base_ms,
       iif(base_ms IS NULL, '-', printf('%+.1f%%', 100.0 * (ms / base_ms - 1))) AS change,
       CASE WHEN slow_ms IS NULL OR ms <= slow_ms THEN ''
            WHEN next_ms IS NULL THEN 'regression?'
            WHEN next_ms > slow_ms THEN 'regression'
            ELSE '' END AS flag
FROM judged
ORDER BY shape, kernel, config, machine, ord;
