/* db.h: the results database (SQLite; schema in reports/schema.sql): opening it safely, storing
 * runs and one case's checks per transaction, the queries of reports/queries/, and merge.
 * Not the checks themselves (engine.h) and not their printing (tbecheck.c).
 *
 * Invariant: a database this module opened for writing is a tbecheck database of this schema
 * version in WAL mode with a busy timeout, so several processes may write it at once; every
 * store is one transaction, so a killed writer leaves whole cases. A file that is not such a
 * database (not SQLite, another application's, a newer schema, corrupt or truncated) is refused
 * with TBE_EINVAL before anything is written to it.
 */
#ifndef HARNESS_DB_H
#define HARNESS_DB_H

#include <stdint.h>

#include "engine.h"
#include "tbe.h"

#define DB_SCHEMA_VERSION 6          /* meta.schema_version of reports/schema.sql */
#define DB_APPLICATION_ID 0x54424543 /* PRAGMA application_id: 'TBEC' */

typedef struct db db;

typedef enum { DB_READ, DB_WRITE } db_mode;

/* Opens the database at path. DB_WRITE creates it (schema included) when the file does not
 * exist or is empty; DB_READ requires it to exist. Errors: TBE_EINVAL when the file is not a
 * tbecheck database of a schema this build reads (the message names the problem; the file is
 * left unchanged), TBE_EIO when it cannot be opened or created. */
tbe_status db_open(const char *path, db_mode mode, db **out);
void db_close(db *d);

/* What a run records about itself (NULL or -1: unknown / not applicable). */
typedef struct {
  const char *git_commit;
  int dirty;
  const char *host, *cpu, *gpu, *driver, *cuda, *tool_version, *argv, *engines, *shard;
  int repeats;
  int injected; /* 1: the run injects a fault (--inject-fault); runs.injected (db.c also marks
                 * every run of a build with a planted fault) */
  const char *campaign; /* runs.campaign: shared by the shards of one campaign, or NULL */
  const char *bench;    /* runs.bench: the benchmark program recording figures, or NULL */
  const char *engine_versions; /* runs.engine_versions (eng_describe_external), or NULL */
  const char *gpu_uuid;        /* runs.gpu_uuid, or NULL */
} db_run_info;

/* Inserts the run (incomplete, started now) and sets *run to its id. */
tbe_status db_run_begin(db *d, const db_run_info *info, int64_t *run);

/* Marks the run ended and complete. */
tbe_status db_run_end(db *d, int64_t run);

/* Stores everything one case produced (the case row if new, one results row per check with
 * its violations, the timings) in one transaction, and sets *case_id. On failure nothing of
 * the case is stored; TBE_EIO carries SQLite's message (e.g. disk full). */
tbe_status db_store_case(db *d, int64_t run, const char *canonical, int repeat,
                         const eng_case_result *r, int64_t *case_id);

/* A raced case (`tbecheck race`): its races row. */
typedef struct {
  int64_t launches;          /* backward launches compared (>= 1) */
  int64_t distinct_outcomes; /* distinct hashes of their bits (1..launches) */
  int64_t mismatches;        /* launches whose bits differ from the reference's */
  int64_t long_runs, chunks; /* the GPU's counts of the first launch */
  const char *variants;      /* each launch's schedule, in order */
} db_race;

/* Stores a raced case as db_store_case does (the case row if new, r's checks as results rows
 * with their violations and timings), and its races row, in one transaction. */
tbe_status db_store_race(db *d, int64_t run, const char *canonical, int repeat,
                         const eng_case_result *r, const db_race *race, int64_t *case_id);

/* One figure of a benchmark: a perf row of a bench run (db_run_info.bench set). */
typedef struct {
  const char *shape;     /* the benchmark's name for the shape timed, e.g. "F1" */
  const char *canonical; /* the shape as a case: canonical text (case_format), stored in cases */
  const char *kernel;    /* what was timed, engine:path: "gpu:forward", "ceiling:gather" */
  const char *config;    /* the configuration timed ("bags=2 width=8"), or NULL: the engine's own */
  int repeat;            /* 0, or which of several figures of the same shape/kernel/config */
  double ms;             /* the time, e.g. a median of CUDA-event timings */
  int64_t bytes;         /* bytes moved by declaration (GB/s = bytes / ms / 1e6) */
  double ceiling_gbps;   /* the copy ceiling measured in the same run; < 0: not measured */
} db_perf_row;

/* Stores one benchmark figure of run `run` (and its case if new) in one transaction. */
tbe_status db_store_perf_row(db *d, int64_t run, const db_perf_row *p);

/* Removes the database file path and SQLite's companions of it (-wal, -shm, -journal): for a
 * database a command created and, refused, must not leave behind. Closed first by the caller. */
void db_remove_files(const char *path);

/* The canonical text of the case whose id (decimal) or hash (16 hex digits) is key; malloc'd.
 * TBE_EINVAL if there is none. */
tbe_status db_case_text(db *d, const char *key, char **canonical);

/* The canonical text of the case of result `result` (an id in results); malloc'd. TBE_EINVAL if
 * there is no such result. */
tbe_status db_result_case_text(db *d, int64_t result, char **canonical);

/* The case hash stored for a canonical text: FNV-1a 64, 16 lowercase hex digits. */
void db_case_hash(const char *canonical, char hex[17]);

/* A named query parameter: bound as text when text is not NULL, else as the integer value. */
typedef struct {
  const char *name; /* with its prefix, e.g. ":run" */
  const char *text;
  int64_t value;
} db_param;

/* The rows of a query as text (NULL cells for SQL NULL). */
typedef struct {
  int ncols, nrows;
  char **names;  /* [ncols] */
  char **cells;  /* [nrows * ncols], row-major */
} db_table;

/* Runs the query reports/queries/<name>.sql (embedded at build time) with the given parameters
 * (parameters it does not use are ignored; those it uses and are not given are NULL). */
tbe_status db_query(db *d, const char *name, const db_param *params, int nparams, db_table *t);
void db_table_free(db_table *t);


/* Copies every run of the database at src_path that d does not hold yet (runs are told apart by
 * uid), with their results, violations and timings, and the cases they need; in one
 * transaction. Sets *runs_added, and *runs_incomplete to how many of them never ended (a
 * killed or cancelled run: its stored cases come along). src must be a tbecheck database of
 * this schema version (TBE_EINVAL otherwise, src unchanged). */
tbe_status db_merge(db *d, const char *src_path, int *runs_added, int *runs_incomplete);

#endif
