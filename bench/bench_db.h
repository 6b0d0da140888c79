/* bench_db.h: a benchmark's figures into the results database: with `--db PATH` a benchmark
 * records a bench run (runs.bench) and one perf row per figure. Not the timing (each bench's)
 * and not the database itself (harness/store/db.h); the report draws these rows (perf_drift.sql).
 *
 * A benchmark calls bench_db_open first (it reads the command line), bench_db_figure for each
 * figure it prints, and bench_db_close at the end; without --db every call does nothing.
 */
#ifndef BENCH_BENCH_DB_H
#define BENCH_BENCH_DB_H

typedef struct bench_db bench_db;

/* Reads the command line: nothing, or `--db PATH` (anything else: usage on stderr, exit 2).
 * With --db, opens (or creates) the database and records a bench run of program `name` on
 * `gpu` (the probe's description, NULL: none) with the source commit, host and CPU; exits 2 or
 * 3 with the message if the database refuses. Returns NULL when there is no --db. */
bench_db *bench_db_open(int argc, char **argv, const char *name, const char *gpu);

/* Records one figure: `kernel` (engine:path, e.g. "gpu:forward", "ceiling:gather") on the
 * shape named `shape` given as case text (canonicalised), in configuration `config` (NULL: the
 * engine's own), taking `ms` for `bytes` declared bytes, beside the copy ceiling of this run
 * (`ceiling_gbps`, < 0: not measured). Does nothing for b NULL; exits 3 if it cannot store. */
void bench_db_figure(bench_db *b, const char *shape, const char *case_text, const char *kernel,
                     const char *config, double ms, double bytes, double ceiling_gbps);

/* Marks the bench run complete and closes the database (NULL: nothing). */
void bench_db_close(bench_db *b);

#endif
