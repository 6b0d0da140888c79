/* db.c: the results database on SQLite: safe open (refuse, never touch, what is not ours),
 * WAL and busy timeout for concurrent writers, one transaction per case, queries, merge.
 * Not the schema (reports/schema.sql, embedded) and not the CLI's printing (tbecheck.c).
 */
#include "db.h"
#include "db_sql.h"

/* A build with a planted fault (fuzz/FAULTS.md) is wrong on purpose: each run it stores is
 * marked injected, whatever command made it, so it stays out of drift, flaky and worst. */
#if defined(TBE_FAULT_NAME)
#define TBE_PLANTED 1
#else
#define TBE_PLANTED 0
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#define DB_BUSY_MS 60000 /* how long a writer waits for another's transaction */

struct db {
  sqlite3 *h;
  char path[1024];
  sqlite3_stmt *ins_case, *get_case, *ins_result, *ins_violation, *ins_perf, *ins_race;
};

/* A status for SQLite error rc on handle h while doing `what`: disk and I/O problems are
 * TBE_EIO, a damaged file TBE_EINVAL, anything else a bug of ours. */
static tbe_status db_fail(const char *path, sqlite3 *h, int rc, const char *what)
{
  int prim = rc & 0xff;
  tbe_code code = prim == SQLITE_NOMEM ? TBE_ENOMEM
                  : prim == SQLITE_CORRUPT || prim == SQLITE_NOTADB ? TBE_EINVAL
                  : prim == SQLITE_FULL || prim == SQLITE_IOERR || prim == SQLITE_CANTOPEN ||
                          prim == SQLITE_READONLY || prim == SQLITE_PERM ||
                          prim == SQLITE_BUSY || prim == SQLITE_LOCKED
                      ? TBE_EIO
                      : TBE_EINTERNAL;
  return tbe_error(code, "database", -1, "%s: %s: %s", path, what,
                   h ? sqlite3_errmsg(h) : sqlite3_errstr(rc));
}

/* db_fail for an error while judging a file: what SQLite cannot run on it (a missing table or
 * column, a damaged constraint) says the file is not a database of ours: bad input, not a bug.
 * So does "out of memory" there: SQLite answers a damaged page that claims more than it can
 * allocate with SQLITE_NOMEM (fuzz/crashes/db/schema_read_out_of_memory, 16 KB), and judging a
 * file allocates little else. */
static tbe_status db_fail_file(const char *path, sqlite3 *h, int rc, const char *what)
{
  tbe_status s = db_fail(path, h, rc, what);
  if (s.code == TBE_EINTERNAL || s.code == TBE_ENOMEM)
    s.code = TBE_EINVAL;
  return s;
}

/* Runs sql (one or more statements, no rows wanted). */
static tbe_status db_exec(db *d, const char *sql, const char *what)
{
  int rc = sqlite3_exec(d->h, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? tbe_ok() : db_fail(d->path, d->h, rc, what);
}

/* The first column of the first row of sql as an integer; *found = 0 when there is no row. */
static int db_int(sqlite3 *h, const char *sql, int64_t *v, int *found)
{
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(h, sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return rc;
  rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW;
  if (rc == SQLITE_ROW) {
    *v = sqlite3_column_int64(st, 0);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

/* Writes "file:PATH?query" with PATH percent-encoded where a URI needs it. */
static int db_uri(const char *path, const char *query, char *buf, size_t n)
{
  size_t k = 0;
  int w = snprintf(buf, n, "file:");
  if (w < 0 || (size_t)w >= n)
    return -1;
  k = (size_t)w;
  for (const char *p = path; *p; p++) {
    w = strchr("%?#", *p) ? snprintf(buf + k, n - k, "%%%02x", (unsigned char)*p)
                          : snprintf(buf + k, n - k, "%c", *p);
    if (w < 0 || (size_t)w >= n - k)
      return -1;
    k += (size_t)w;
  }
  w = snprintf(buf + k, n - k, "?%s", query);
  return w < 0 || (size_t)w >= n - k ? -1 : 0;
}

/* The directory path lies in, into buf ("." for a bare name); returns buf. */
static const char *db_dir(const char *path, char *buf, size_t n)
{
  const char *slash = strrchr(path, '/');
  snprintf(buf, n, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
  return buf;
}

static int db_file_exists(const char *path, const char *suffix)
{
  char p[1100];
  struct stat st;
  return snprintf(p, sizeof p, "%s%s", path, suffix) < (int)sizeof p && stat(p, &st) == 0;
}

/* Checks that the open handle h is a tbecheck database of a schema this build can use (version
 * min_version .. DB_SCHEMA_VERSION; *version receives it), and not damaged. *empty is set (and
 * the status ok) when h is a SQLite database without a single table: nothing to lose, so a
 * writer may make it a tbecheck database (another tbecheck may be doing so right now). */
static tbe_status db_check(const char *path, sqlite3 *h, int min_version, int *empty,
                           int64_t *version)
{
  int64_t v = 0, tables = 0;
  int found = 0;
  *empty = 0;
  int rc = db_int(h, "PRAGMA application_id", &v, &found);
  if (rc == SQLITE_OK && v == 0)
    rc = db_int(h, "SELECT count(*) FROM sqlite_schema", &tables, &found);
  if (rc != SQLITE_OK)
    return (rc & 0xff) == SQLITE_NOTADB
               ? tbe_error(TBE_EINVAL, "database", -1,
                           "%s is not a SQLite database (it may be another kind of file)", path)
               : db_fail_file(path, h, rc, "cannot read the database header (truncated or corrupt)");
  if (v == 0 && tables == 0) {
    *empty = 1;
    return tbe_ok();
  }
  if (v != DB_APPLICATION_ID)
    return tbe_error(TBE_EINVAL, "database", -1,
                     "%s is a SQLite database but not a tbecheck one (application_id %lld)", path,
                     (long long)v);
  rc = db_int(h, "SELECT schema_version FROM meta", &v, &found);
  if (rc != SQLITE_OK || !found)
    return rc != SQLITE_OK ? db_fail_file(path, h, rc, "cannot read its schema version (corrupt?)")
                           : tbe_error(TBE_EINVAL, "database", -1,
                                       "%s has no schema version (meta is empty)", path);
  *version = v;
  if (v > DB_SCHEMA_VERSION)
    return tbe_error(TBE_EINVAL, "database", -1,
                     "%s has schema version %lld, newer than this tbecheck's %d: use a newer "
                     "tbecheck", path, (long long)v, DB_SCHEMA_VERSION);
  if (v < min_version)
    return tbe_error(TBE_EINVAL, "database", -1,
                     "%s has schema version %lld, older than this tbecheck's %d: a tbecheck run "
                     "(or merge) into it upgrades it", path, (long long)v, DB_SCHEMA_VERSION);
  sqlite3_stmt *st;
  rc = sqlite3_prepare_v2(h, "PRAGMA quick_check", -1, &st, NULL);
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *msg = (const char *)sqlite3_column_text(st, 0);
    tbe_status s = msg && !strcmp(msg, "ok")
                       ? tbe_ok()
                       : tbe_error(TBE_EINVAL, "database", -1, "%s is corrupt: %s", path,
                                   msg ? msg : "?");
    sqlite3_finalize(st);
    return s;
  }
  sqlite3_finalize(st);
  return db_fail_file(path, h, rc, "is corrupt or truncated");
}

/* Checks the existing file at path without writing anything, in one read transaction: the
 * file's identity, schema version and pages are judged in one snapshot, since another tbecheck
 * may be creating or filling it right now (two snapshots could see its application_id before
 * its commit and its tables after). A file with pending state (-wal, -journal) is read through
 * a read-only connection, which never replays that state into a file it may refuse. Otherwise,
 * where this user may write the file and its directory, through a read-write connection held
 * to queries: it takes SQLite's locks, and as the last to close it removes the -wal and -shm
 * files its read made. Elsewhere (an archive) as immutable, which makes no file beside it.
 * min_version as db_check. */
static tbe_status db_validate(const char *path, int min_version, int *empty, int64_t *version)
{
  char dir[1100];
  int writable =
      access(path, W_OK) == 0 && access(db_dir(path, dir, sizeof dir), W_OK | X_OK) == 0;
  int pending = db_file_exists(path, "-wal") || db_file_exists(path, "-journal");
  const char *how = pending ? "mode=ro" : writable ? "mode=rw" : "immutable=1";
  char uri[2200];
  if (db_uri(path, how, uri, sizeof uri))
    return tbe_error(TBE_EINVAL, "database", -1, "database path too long: %s", path);
  sqlite3 *h = NULL;
  int flags = !pending && writable ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY;
  int rc = sqlite3_open_v2(uri, &h, flags | SQLITE_OPEN_URI, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(h, DB_BUSY_MS);
    rc = sqlite3_exec(h, "PRAGMA query_only = 1; BEGIN", NULL, NULL, NULL);
  }
  tbe_status s = rc == SQLITE_OK ? db_check(path, h, min_version, empty, version)
                                 : db_fail(path, h, rc, "cannot open");
  sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(h);
  return s;
}

/* PRAGMA journal_mode = WAL needs the file to itself for a moment. When two connections both
 * hold a read lock and want it, neither can wait for the other, so SQLite answers SQLITE_BUSY
 * at once, without its busy handler; each attempt ends its statement and so drops its lock,
 * and the switch is retried here, after a short pause, within the busy timeout. */
static tbe_status db_switch_to_wal(db *d)
{
  int rc;
  for (int waited_ms = 0;; waited_ms += 2) { /* each pause is 1 to 3 ms */
    rc = sqlite3_exec(d->h, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;", NULL,
                      NULL, NULL);
    if ((rc & 0xff) != SQLITE_BUSY || waited_ms >= DB_BUSY_MS)
      break;
    long jitter = (long)(((unsigned)getpid() * 2654435761u + (unsigned)waited_ms) % 2000000u);
    struct timespec pause = {0, 1000000 + jitter}; /* apart, so the contenders do not meet again */
    nanosleep(&pause, NULL);
  }
  return rc == SQLITE_OK ? tbe_ok() : db_fail(d->path, d->h, rc, "cannot switch to WAL");
}

/* Creates the schema in a new (empty) database, unless a concurrent tbecheck just did (then
 * checks what it made), or upgrades an older one (upgrade.sql, unless a concurrent tbecheck just
 * did); in one transaction, with the views (views.sql). */
static tbe_status db_prepare_all(db *d);

/* Refuses (TBE_EINVAL) a database whose pages do not pass SQLite's quick_check: nothing may
 * write into one (an upgrade of a corrupt file could not be rolled back cleanly). Reads only. */
static tbe_status db_quick_check(db *d)
{
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(d->h, "PRAGMA quick_check", -1, &st, NULL);
  int ok = rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
           sqlite3_column_text(st, 0) && !strcmp((const char *)sqlite3_column_text(st, 0), "ok");
  char first[160] = "";
  if (!ok && rc == SQLITE_OK && sqlite3_column_text(st, 0))
    snprintf(first, sizeof first, ": %s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return ok ? tbe_ok()
            : tbe_error(TBE_EINVAL, "database", -1, "%s is corrupt (quick_check%s)", d->path, first);
}

/* Widens a CHECK of results in place, its text `from` becoming `to`: SQLite cannot alter a
 * CHECK, and its documented procedure for loosening one (writable_schema, then a new
 * schema_version) leaves every stored row valid, since the old values are a subset. */
static tbe_status db_widen_check(db *d, const char *from, const char *to, const char *what)
{
  int64_t v = 0;
  int found;
  char sql[1024];
  snprintf(sql, sizeof sql, "PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = "
                            "replace(sql, '%s', '%s') WHERE type = 'table' AND name = 'results'",
           from, to);
  tbe_status s = db_exec(d, sql, what);
  if (s.code == TBE_OK && db_int(d->h, "PRAGMA schema_version", &v, &found) != SQLITE_OK)
    s = tbe_error(TBE_EINVAL, "database", -1, "%s: cannot read its schema cookie", d->path);
  snprintf(sql, sizeof sql, "PRAGMA schema_version = %lld", (long long)v + 1);
  if (s.code == TBE_OK)
    s = db_exec(d, sql, what);
  sqlite3_exec(d->h, "PRAGMA writable_schema = OFF", NULL, NULL, NULL);
  return s;
}

/* Runs the steps of upgrade.sql from schema version `from` on: the text from its line
 * '-- FROM -> ' to the end (before 4 and 6, with results' CHECKs widened first). */
static tbe_status db_upgrade(db *d, int64_t from)
{
  tbe_status s = tbe_ok();
  if (from < 4) /* 'model' */
    s = db_widen_check(d, "baseline IN (''ref'', ''exact'')",
                       "baseline IN (''ref'', ''model'', ''exact'')",
                       "cannot widen results.baseline");
  if (s.code == TBE_OK && from < 6) /* external engines */
    s = db_widen_check(d, "engine IN (''ref'', ''gpu'', ''oracle'')",
                       "engine IN (''ref'', ''gpu'', ''oracle'') OR (engine GLOB ''ext.?*'' AND "
                       "engine NOT GLOB ''ext.*[^a-z0-9_]*'')",
                       "cannot widen results.engine");
  if (s.code != TBE_OK)
    return s;
  char mark[32];
  snprintf(mark, sizeof mark, "\n-- %lld -> ", (long long)from);
  const char *steps = strstr(db_sql("upgrade"), mark);
  if (!steps)
    return tbe_error(TBE_EINTERNAL, "database", -1, "upgrade.sql has no step from version %lld",
                     (long long)from);
  return db_exec(d, steps, "cannot upgrade the schema");
}

static tbe_status db_create(db *d)
{
  tbe_status s = db_exec(d, "BEGIN IMMEDIATE", "cannot start creating the database");
  if (s.code != TBE_OK)
    return s;
  int empty;
  int64_t version = DB_SCHEMA_VERSION;
  s = db_check(d->path, d->h, 1, &empty, &version);
  if (s.code == TBE_OK && empty)
    s = db_exec(d, db_sql("schema"), "cannot create the schema");
  else if (s.code == TBE_OK && version < DB_SCHEMA_VERSION)
    s = db_upgrade(d, version);
  if (s.code == TBE_OK && (empty || version < DB_SCHEMA_VERSION))
    s = db_exec(d, db_sql("views"), "cannot create the views");
  if (s.code == TBE_OK) /* before the commit: tables that refuse our statements roll back */
    s = db_prepare_all(d);
  if (s.code == TBE_OK)
    s = db_exec(d, "COMMIT", "cannot commit the new schema");
  if (s.code != TBE_OK)
    sqlite3_exec(d->h, "ROLLBACK", NULL, NULL, NULL);
  return s;
}

static tbe_status db_prepare(db *d, const char *sql, sqlite3_stmt **st)
{
  int rc = sqlite3_prepare_v3(d->h, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
  return rc == SQLITE_OK ? tbe_ok() : db_fail(d->path, d->h, rc, "cannot prepare a statement");
}

static tbe_status db_prepare_all(db *d)
{
  tbe_status s = db_prepare(d, "INSERT INTO cases (canonical, hash) VALUES (?1, ?2) "
                               "ON CONFLICT (canonical) DO NOTHING", &d->ins_case);
  if (s.code == TBE_OK)
    s = db_prepare(d, "SELECT id FROM cases WHERE canonical = ?1", &d->get_case);
  if (s.code == TBE_OK)
    s = db_prepare(d,
                   "INSERT INTO results (run, case_id, repeat, engine, baseline, path, output, "
                   "metric, status, reason, elements, exact, max_ulp, max_abs, max_rel, "
                   "worst_bound_ratio, violations, digest, ref_ms, gpu_ms) VALUES (?1, ?2, ?3, ?4, "
                   "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
                   &d->ins_result);
  if (s.code == TBE_OK)
    s = db_prepare(d,
                   "INSERT INTO violations (result, element, coordinates, expected, got, bound) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                   &d->ins_violation);
  if (s.code == TBE_OK)
    s = db_prepare(d,
                   "INSERT INTO perf (run, case_id, repeat, kernel, ms, bytes, gbps, shape, config, "
                   "ceiling_gbps) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                   &d->ins_perf);
  if (s.code == TBE_OK)
    s = db_prepare(d,
                   "INSERT INTO races (run, case_id, repeat, launches, distinct_outcomes, "
                   "mismatches, long_runs, chunks, variants) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
                   "?8, ?9)",
                   &d->ins_race);
  return s;
}

/* Prepares sql and binds the named parameters it uses. */
static tbe_status db_prepare_query(db *d, const char *sql, const db_param *params, int nparams,
                                   sqlite3_stmt **st)
{
  int rc = sqlite3_prepare_v2(d->h, sql, -1, st, NULL);
  if (rc != SQLITE_OK)
    return db_fail(d->path, d->h, rc, "cannot prepare a query");
  for (int i = 0; i < nparams; i++) {
    int k = sqlite3_bind_parameter_index(*st, params[i].name);
    if (k > 0 && params[i].text)
      sqlite3_bind_text(*st, k, params[i].text, -1, SQLITE_TRANSIENT);
    else if (k > 0)
      sqlite3_bind_int64(*st, k, params[i].value);
  }
  return tbe_ok();
}

tbe_status db_open(const char *path, db_mode mode, db **out)
{
  *out = NULL;
  if (!*path) /* SQLite would open a private temporary database and discard it */
    return tbe_error(TBE_EINVAL, "database", -1, "the database path is empty");
  struct stat st;
  int exists = stat(path, &st) == 0;
  if (!exists && errno != ENOENT)
    return tbe_error(TBE_EINVAL, "database", -1, "%s: %s", path, strerror(errno));
  if (exists && !S_ISREG(st.st_mode))
    return tbe_error(TBE_EINVAL, "database", -1, "%s is not a regular file", path);
  char dir[1100];
  db_dir(path, dir, sizeof dir);
  if (mode == DB_WRITE) { /* refused here, before any work, not by the first write */
    if (exists && access(path, R_OK | W_OK) != 0)
      return tbe_error(TBE_EINVAL, "database", -1, "%s cannot be written by this user (uid %u): "
                       "it has mode %04o and owner uid %u (%s); give --db a database you may "
                       "write", path, (unsigned)geteuid(), (unsigned)(st.st_mode & 07777),
                       (unsigned)st.st_uid, strerror(errno));
    if (access(dir, W_OK | X_OK) != 0)
      return tbe_error(TBE_EINVAL, "database", -1, "cannot write in the directory %s (uid %u): "
                       "%s; a database is written with its -wal and -shm files beside it",
                       dir, (unsigned)geteuid(), strerror(errno));
  }
  int fresh = !exists || (st.st_size == 0 && !db_file_exists(path, "-wal"));
  const int has_pages = !fresh; /* a file SQLite may hold pages in: checked before any write */
  int64_t version = DB_SCHEMA_VERSION;
  if (!fresh) {
    tbe_status s = db_validate(path, mode == DB_WRITE ? 1 : DB_SCHEMA_VERSION, &fresh, &version);
    if (s.code != TBE_OK)
      return s;
  }
  if (fresh && mode == DB_READ)
    return tbe_error(TBE_EINVAL, "database", -1, "%s: %s", path,
                     exists ? "the database is empty (tbecheck run fills it)"
                            : "no such database (tbecheck run creates one)");
  db *d = calloc(1, sizeof *d);
  if (!d)
    return tbe_error(TBE_ENOMEM, "database", -1, "out of memory");
  snprintf(d->path, sizeof d->path, "%s", path);
  /* A reader of a WAL database needs its -shm file, which it cannot create in a directory it
   * may not write (an archived database): then, with no WAL file to replay, it reads the file
   * as immutable. Where it may write the file, it reads through a read-write connection held
   * to queries (query_only): only such a connection, the last to close, removes the -wal and
   * -shm files a read made (a read-only one leaves them behind). Elsewhere it reads as a
   * read-only SQLite reader. Each reads beside concurrent writers. */
  int archived = mode == DB_READ && !db_file_exists(path, "-wal") && access(dir, W_OK) != 0;
  int tidy = mode == DB_READ && !archived && access(path, W_OK) == 0;
  char uri[2200];
  if (db_uri(path, mode == DB_WRITE ? "mode=rwc" : archived ? "immutable=1"
                   : tidy ? "mode=rw" : "mode=ro", uri, sizeof uri)) {
    free(d);
    return tbe_error(TBE_EINVAL, "database", -1, "database path too long: %s", path);
  }
  int flags = mode == DB_WRITE ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
              : tidy           ? SQLITE_OPEN_READWRITE
                               : SQLITE_OPEN_READONLY;
  int rc = sqlite3_open_v2(uri, &d->h, flags | SQLITE_OPEN_URI, NULL);
  tbe_status s = rc == SQLITE_OK ? tbe_ok() : db_fail(path, d->h, rc, "cannot open");
  if (s.code == TBE_OK)
    sqlite3_busy_timeout(d->h, DB_BUSY_MS);
  if (s.code == TBE_OK && tidy)
    s = db_exec(d, "PRAGMA query_only = 1", "cannot hold the reader to queries");
  if (s.code == TBE_OK && mode == DB_WRITE && has_pages && (fresh || version < DB_SCHEMA_VERSION))
    s = db_quick_check(d);
  if (s.code == TBE_OK && mode == DB_WRITE && !fresh) {
    /* before the switch to WAL writes the header: the tables must take our statements (a
     * read-only connection does not compile their CHECK constraints, so db_check cannot); an
     * older schema is upgraded in one transaction that rolls back if they do not */
    s = version < DB_SCHEMA_VERSION ? db_create(d) : db_prepare_all(d);
    if (s.code == TBE_EINTERNAL)
      s.code = TBE_EINVAL;
  }
  if (s.code == TBE_OK && mode == DB_WRITE)
    s = db_switch_to_wal(d);
  if (s.code == TBE_OK)
    s = db_exec(d, "PRAGMA foreign_keys = ON", "cannot enable foreign keys");
  if (s.code == TBE_OK && mode == DB_WRITE && fresh)
    s = db_create(d);
  if (s.code != TBE_OK) {
    db_close(d);
    return s;
  }
  *out = d;
  return tbe_ok();
}

void db_remove_files(const char *path)
{
  static const char *const tails[] = {"", "-wal", "-shm", "-journal"};
  for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
    char p[4200];
    snprintf(p, sizeof p, "%s%s", path, tails[i]);
    unlink(p);
  }
}

void db_close(db *d)
{
  if (!d)
    return;
  sqlite3_finalize(d->ins_case);
  sqlite3_finalize(d->get_case);
  sqlite3_finalize(d->ins_result);
  sqlite3_finalize(d->ins_violation);
  sqlite3_finalize(d->ins_perf);
  sqlite3_finalize(d->ins_race);
  sqlite3_close(d->h);
  free(d);
}

/* Binds v as text, or NULL. */
static void db_bind_text(sqlite3_stmt *st, int i, const char *v)
{
  if (v)
    sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(st, i);
}

/* Binds v, or NULL when v < 0 (unknown timings, dirty flag). */
static void db_bind_nonneg(sqlite3_stmt *st, int i, double v)
{
  if (v >= 0)
    sqlite3_bind_double(st, i, v);
  else
    sqlite3_bind_null(st, i);
}

/* Binds a value that may be NaN (stored as NULL). */
static void db_bind_real(sqlite3_stmt *st, int i, double v)
{
  if (v == v)
    sqlite3_bind_double(st, i, v);
  else
    sqlite3_bind_null(st, i);
}

/* Steps a statement that returns no rows, then resets it. */
static int db_step(sqlite3_stmt *st)
{
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

tbe_status db_run_begin(db *d, const db_run_info *in, int64_t *run)
{
  unsigned char rnd[16];
  FILE *f = fopen("/dev/urandom", "rb");
  size_t got = f ? fread(rnd, 1, sizeof rnd, f) : 0;
  if (f)
    fclose(f);
  if (got != sizeof rnd)
    return tbe_error(TBE_EIO, "run", -1, "cannot read /dev/urandom for the run's uid");
  char uid[33];
  for (int i = 0; i < 16; i++)
    snprintf(uid + 2 * i, 3, "%02x", rnd[i]);
  sqlite3_stmt *st;
  tbe_status s = db_prepare(d,
                            "INSERT INTO runs (uid, git_commit, dirty, host, cpu, gpu, driver, "
                            "cuda, tool_version, argv, engines, shard, repeats, injected, "
                            "campaign, bench, engine_versions, gpu_uuid, started) VALUES (?1, "
                            "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, "
                            "?17, ?18, "
                            "strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                            &st);
  if (s.code != TBE_OK)
    return s;
  db_bind_text(st, 1, uid);
  db_bind_text(st, 2, in->git_commit);
  if (in->dirty >= 0)
    sqlite3_bind_int(st, 3, in->dirty);
  const char *text[] = {in->host, in->cpu, in->gpu, in->driver, in->cuda, in->tool_version,
                        in->argv, in->engines, in->shard};
  for (int i = 0; i < 9; i++)
    db_bind_text(st, 4 + i, text[i]);
  sqlite3_bind_int(st, 13, in->repeats);
  sqlite3_bind_int(st, 14, in->injected || TBE_PLANTED);
  db_bind_text(st, 15, in->campaign);
  db_bind_text(st, 16, in->bench);
  db_bind_text(st, 17, in->engine_versions);
  db_bind_text(st, 18, in->gpu_uuid);
  int rc = db_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_OK)
    return db_fail(d->path, d->h, rc, "cannot record the run");
  *run = sqlite3_last_insert_rowid(d->h);
  return tbe_ok();
}

tbe_status db_run_end(db *d, int64_t run)
{
  sqlite3_stmt *st;
  db_param p = {":run", NULL, run};
  tbe_status s = db_prepare_query(d,
                                  "UPDATE runs SET ended = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), "
                                  "complete = 1 WHERE id = :run",
                                  &p, 1, &st);
  if (s.code != TBE_OK)
    return s;
  int rc = db_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_OK ? tbe_ok() : db_fail(d->path, d->h, rc, "cannot mark the run complete");
}

void db_case_hash(const char *canonical, char hex[17])
{
  snprintf(hex, 17, "%016llx",
           (unsigned long long)eng_fnv1a(ENG_FNV_SEED, canonical, strlen(canonical)));
}

static int db_store_check(db *d, int64_t run, int64_t case_id, int repeat,
                          const eng_case_result *r, const eng_check *c)
{
  sqlite3_stmt *st = d->ins_result;
  sqlite3_bind_int64(st, 1, run);
  sqlite3_bind_int64(st, 2, case_id);
  sqlite3_bind_int(st, 3, repeat);
  db_bind_text(st, 4, eng_name(c->engine));
  db_bind_text(st, 5, c->baseline);
  db_bind_text(st, 6, c->path);
  db_bind_text(st, 7, c->output);
  db_bind_text(st, 8, cmp_metric_name(c->metric));
  db_bind_text(st, 9, eng_status_name(c->status));
  db_bind_text(st, 10, c->status == ENG_PASS ? NULL : c->reason);
  if (c->compared) {
    const cmp_result *m = &c->cmp;
    sqlite3_bind_int64(st, 11, m->elements);
    sqlite3_bind_int64(st, 12, m->exact);
    sqlite3_bind_int64(st, 13, m->max_ulp);
    db_bind_real(st, 14, m->max_abs);
    db_bind_real(st, 15, m->max_rel);
    if (m->metric == CMP_BOUND)
      db_bind_real(st, 16, m->worst_bound_ratio);
    sqlite3_bind_int64(st, 17, m->violations);
  }
  char digest[17];
  snprintf(digest, sizeof digest, "%016llx", (unsigned long long)c->digest);
  db_bind_text(st, 18, c->has_digest ? digest : NULL);
  db_bind_nonneg(st, 19, r->ref_ms);
  db_bind_nonneg(st, 20, c->engine == ENG_GPU ? r->gpu_ms : -1);
  int rc = db_step(st);
  int64_t result = sqlite3_last_insert_rowid(d->h);
  for (int i = 0; rc == SQLITE_OK && i < c->n_violations; i++) {
    const eng_violation *v = &c->violations[i];
    st = d->ins_violation;
    sqlite3_bind_int64(st, 1, result);
    sqlite3_bind_int64(st, 2, v->v.index);
    db_bind_text(st, 3, v->coordinates);
    db_bind_real(st, 4, v->v.expected);
    db_bind_real(st, 5, v->v.got);
    sqlite3_bind_double(st, 6, v->v.bound);
    rc = db_step(st);
  }
  return rc;
}

/* Inserts a perf row: a check run's timing of one case (p->shape NULL), or a benchmark's figure
 * (kernel and repeat then come from p, engine ignored). */
static int db_insert_perf(db *d, int64_t run, int64_t case_id, int repeat, const char *kernel,
                          const db_perf_row *p)
{
  sqlite3_stmt *st = d->ins_perf;
  sqlite3_bind_int64(st, 1, run);
  sqlite3_bind_int64(st, 2, case_id);
  sqlite3_bind_int(st, 3, repeat);
  db_bind_text(st, 4, kernel);
  sqlite3_bind_double(st, 5, p->ms);
  sqlite3_bind_int64(st, 6, p->bytes);
  if (p->ms > 0)
    sqlite3_bind_double(st, 7, (double)p->bytes / p->ms / 1e6);
  db_bind_text(st, 8, p->shape);
  db_bind_text(st, 9, p->config);
  db_bind_nonneg(st, 10, p->ceiling_gbps);
  return db_step(st);
}

static int db_store_perf(db *d, int64_t run, int64_t case_id, int repeat, const eng_perf *p)
{
  char kernel[64];
  snprintf(kernel, sizeof kernel, "%s:%s", eng_name(p->engine), p->path);
  db_perf_row row = {.ms = p->ms, .bytes = p->bytes, .ceiling_gbps = -1};
  return db_insert_perf(d, run, case_id, repeat, kernel, &row);
}

/* Opens a transaction and finds (or inserts) the case of a canonical text: *case_id. On an
 * error the transaction is rolled back, except when BEGIN itself failed. */
static tbe_status db_begin_case(db *d, const char *canonical, int64_t *case_id, int *rc)
{
  tbe_status s = db_exec(d, "BEGIN IMMEDIATE", "cannot start a transaction");
  if (s.code != TBE_OK)
    return s;
  char hash[17];
  db_case_hash(canonical, hash);
  db_bind_text(d->ins_case, 1, canonical);
  db_bind_text(d->ins_case, 2, hash);
  *rc = db_step(d->ins_case);
  if (*rc == SQLITE_OK) {
    db_bind_text(d->get_case, 1, canonical);
    *rc = sqlite3_step(d->get_case);
    *case_id = sqlite3_column_int64(d->get_case, 0);
    *rc = *rc == SQLITE_ROW ? SQLITE_OK : *rc;
    sqlite3_reset(d->get_case);
  }
  return s;
}

/* Commits the transaction of db_begin_case when rc is SQLITE_OK, else rolls it back and says
 * what could not be stored. */
static tbe_status db_end_case(db *d, int rc, const char *what)
{
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(d->h, "COMMIT", NULL, NULL, NULL);
  if (rc == SQLITE_OK)
    return tbe_ok();
  tbe_status s = db_fail(d->path, d->h, rc, what);
  sqlite3_exec(d->h, "ROLLBACK", NULL, NULL, NULL);
  return s;
}

tbe_status db_store_perf_row(db *d, int64_t run, const db_perf_row *p)
{
  int64_t case_id = 0;
  int rc = SQLITE_OK;
  tbe_status s = db_begin_case(d, p->canonical, &case_id, &rc);
  if (s.code != TBE_OK)
    return s;
  if (rc == SQLITE_OK)
    rc = db_insert_perf(d, run, case_id, p->repeat, p->kernel, p);
  return db_end_case(d, rc, "cannot store the benchmark's figure");
}

/* The case, r's checks and timings and, unless race is NULL, its races row: one transaction. */
static tbe_status db_store(db *d, int64_t run, const char *canonical, int repeat,
                           const eng_case_result *r, const db_race *race, int64_t *case_id)
{
  int rc = SQLITE_OK;
  tbe_status s = db_begin_case(d, canonical, case_id, &rc);
  if (s.code != TBE_OK)
    return s;
  for (int i = 0; rc == SQLITE_OK && i < r->n_checks; i++)
    rc = db_store_check(d, run, *case_id, repeat, r, &r->checks[i]);
  for (int i = 0; rc == SQLITE_OK && i < r->n_perf; i++)
    rc = db_store_perf(d, run, *case_id, repeat, &r->perf[i]);
  if (rc == SQLITE_OK && race) {
    sqlite3_stmt *st = d->ins_race;
    const int64_t v[] = {run, *case_id, repeat, race->launches, race->distinct_outcomes,
                         race->mismatches, race->long_runs, race->chunks};
    for (int i = 0; i < 8; i++)
      sqlite3_bind_int64(st, i + 1, v[i]);
    db_bind_text(st, 9, race->variants);
    rc = db_step(st);
  }
  return db_end_case(d, rc, "cannot store the case's results");
}

tbe_status db_store_case(db *d, int64_t run, const char *canonical, int repeat,
                         const eng_case_result *r, int64_t *case_id)
{
  return db_store(d, run, canonical, repeat, r, NULL, case_id);
}

tbe_status db_store_race(db *d, int64_t run, const char *canonical, int repeat,
                         const eng_case_result *r, const db_race *race, int64_t *case_id)
{
  return db_store(d, run, canonical, repeat, r, race, case_id);
}

/* The first column of the one row `sql` gives for its parameter into *text (malloc'd); `none`
 * names what is missing when there is no row (TBE_EINVAL). */
static tbe_status db_lookup_text(db *d, const char *sql, const db_param *p, const char *none,
                                 char **text)
{
  *text = NULL;
  sqlite3_stmt *st;
  tbe_status s = db_prepare_query(d, sql, p, 1, &st);
  if (s.code != TBE_OK)
    return s;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *text = strdup((const char *)sqlite3_column_text(st, 0));
    if (!*text)
      s = tbe_error(TBE_ENOMEM, "case", -1, "out of memory");
  } else if (rc == SQLITE_DONE) {
    s = tbe_error(TBE_EINVAL, "case", -1, "%s has no %s", d->path, none);
  } else {
    s = db_fail(d->path, d->h, rc, "cannot look up the case");
  }
  sqlite3_finalize(st);
  return s;
}

tbe_status db_case_text(db *d, const char *key, char **canonical)
{
  char none[160];
  snprintf(none, sizeof none, "case with id or hash '%.40s'%s", key,
           strspn(key, "0123456789") == strlen(key)
               ? " (a bare number is a case id; replay --result N takes a result id)" : "");
  db_param p = {":key", key, 0};
  return db_lookup_text(d, "SELECT canonical FROM cases WHERE hash = :key OR "
                           "(:key NOT GLOB '*[^0-9]*' AND id = CAST(:key AS INTEGER))",
                        &p, none, canonical);
}

tbe_status db_result_case_text(db *d, int64_t result, char **canonical)
{
  char none[64];
  snprintf(none, sizeof none, "result %lld", (long long)result);
  db_param p = {":id", NULL, result};
  return db_lookup_text(d, "SELECT c.canonical FROM results r JOIN cases c ON c.id = r.case_id "
                           "WHERE r.id = :id", &p, none, canonical);
}

/* Appends a copy of s (or NULL) as cell *used of t; -1 when out of memory. */
static int db_table_push(db_table *t, size_t *used, size_t *cap, const char *s)
{
  if (*used == *cap) {
    size_t ncap = *cap ? 2 * *cap : 64;
    char **p = realloc(t->cells, sizeof *p * ncap);
    if (!p)
      return -1;
    t->cells = p;
    *cap = ncap;
  }
  char *copy = s ? strdup(s) : NULL;
  if (s && !copy)
    return -1;
  t->cells[(*used)++] = copy;
  return 0;
}

tbe_status db_query(db *d, const char *name, const db_param *params, int nparams, db_table *t)
{
  memset(t, 0, sizeof t[0]);
  char key[128];
  snprintf(key, sizeof key, "queries/%s", name);
  const char *sql = db_sql(key);
  if (!sql)
    return tbe_error(TBE_EINTERNAL, "query", -1, "no query reports/queries/%s.sql", name);
  sqlite3_stmt *st;
  tbe_status s = db_prepare_query(d, sql, params, nparams, &st);
  if (s.code != TBE_OK)
    return s;
  t->ncols = sqlite3_column_count(st);
  t->names = calloc((size_t)t->ncols + 1, sizeof *t->names);
  int oom = !t->names;
  for (int c = 0; !oom && c < t->ncols; c++)
    oom = !(t->names[c] = strdup(sqlite3_column_name(st, c)));
  size_t used = 0, cap = 0;
  int rc = SQLITE_DONE;
  while (!oom && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    for (int c = 0; !oom && c < t->ncols; c++)
      oom = db_table_push(t, &used, &cap, (const char *)sqlite3_column_text(st, c)) != 0;
    t->nrows += !oom;
  }
  if (oom) {
    while (used > (size_t)t->nrows * (size_t)t->ncols) /* a partial row */
      free(t->cells[--used]);
    s = tbe_error(TBE_ENOMEM, "query", -1, "out of memory reading %s", name);
  } else if (rc != SQLITE_DONE) {
    s = db_fail(d->path, d->h, rc, "query failed");
  }
  sqlite3_finalize(st);
  if (s.code != TBE_OK)
    db_table_free(t);
  return s;
}

void db_table_free(db_table *t)
{
  for (int c = 0; t->names && c < t->ncols; c++)
    free(t->names[c]);
  for (int64_t i = 0; i < (int64_t)t->nrows * t->ncols; i++)
    free(t->cells[i]);
  free(t->names);
  free(t->cells);
  memset(t, 0, sizeof t[0]);
}

tbe_status db_merge(db *d, const char *src_path, int *runs_added, int *runs_incomplete)
{
  *runs_added = *runs_incomplete = 0;
  if (access(src_path, F_OK) != 0)
    return tbe_error(TBE_EINVAL, "database", -1, "%s: %s", src_path,
                     errno == ENOENT ? "no such database" : strerror(errno));
  int empty;
  int64_t version;
  tbe_status s = db_validate(src_path, DB_SCHEMA_VERSION, &empty, &version);
  if (s.code == TBE_OK && empty)
    s = tbe_error(TBE_EINVAL, "database", -1, "%s is an empty database", src_path);
  if (s.code != TBE_OK)
    return s;
  char uri[2200];
  if (db_uri(src_path, "mode=ro", uri, sizeof uri))
    return tbe_error(TBE_EINVAL, "database", -1, "database path too long: %s", src_path);
  sqlite3_stmt *st;
  db_param p = {":uri", uri, 0};
  s = db_prepare_query(d, "ATTACH :uri AS src", &p, 1, &st);
  if (s.code != TBE_OK)
    return s;
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return db_fail(src_path, d->h, rc, "cannot attach");
  s = db_exec(d, "BEGIN IMMEDIATE", "cannot start the merge");
  if (s.code == TBE_OK)
    s = db_exec(d, db_sql("merge"), "cannot merge");
  int64_t n = 0, open_runs = 0;
  int found;
  if (s.code == TBE_OK && (rc = db_int(d->h, "SELECT count(*) FROM temp.m_runs", &n, &found)))
    s = db_fail(d->path, d->h, rc, "cannot count the merged runs");
  if (s.code == TBE_OK &&
      (rc = db_int(d->h, "SELECT count(*) FROM temp.m_runs WHERE complete = 0", &open_runs,
                   &found)))
    s = db_fail(d->path, d->h, rc, "cannot count the merged runs");
  if (s.code == TBE_OK)
    s = db_exec(d, "COMMIT", "cannot commit the merge");
  if (s.code != TBE_OK)
    sqlite3_exec(d->h, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_exec(d->h,
               "DROP TABLE IF EXISTS temp.m_runs; DROP TABLE IF EXISTS temp.m_results; "
               "DROP TABLE IF EXISTS temp.m_violations; DROP TABLE IF EXISTS temp.m_perf; "
               "DROP TABLE IF EXISTS temp.m_races; "
               "DETACH src",
               NULL, NULL, NULL);
  *runs_added = (int)n;
  *runs_incomplete = (int)open_runs;
  return s;
}
