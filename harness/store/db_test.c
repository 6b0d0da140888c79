/* db_test.c: the results database keeps what it is given and refuses, untouched, every file
 * that is not a tbecheck database of this schema (text, truncated, foreign, newer); merge
 * renumbers, deduplicates cases and is idempotent. Not the CLI's tests (cli_test.py).
 */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db.h"
#include "test_tmpdir.h"
#include "test_util.h"

static char tmp[256];

static const char *path_in_tmp(const char *name)
{
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
  return buf[k];
}

/* Reads a whole file (malloc'd) into *data; returns its size or -1. */
static long slurp(const char *path, char **data)
{
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *data = malloc((size_t)n + 1);
  if (fread(*data, 1, (size_t)n, f) != (size_t)n)
    n = -1;
  fclose(f);
  return n;
}

static void spit(const char *path, const char *data, long n)
{
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(data, 1, (size_t)n, f);
    fclose(f);
  }
}

static int exists(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0;
}

/* Runs sql on the file through a plain SQLite connection; returns the SQLite code. */
static int raw_exec(const char *path, const char *sql)
{
  sqlite3 *h;
  int rc = sqlite3_open(path, &h);
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(h, sql, NULL, NULL, NULL);
  sqlite3_close(h);
  return rc;
}

/* The first column of sql's first row as text (static buffer). */
static const char *raw_text(const char *path, const char *sql)
{
  static char out[256];
  sqlite3 *h;
  sqlite3_stmt *st;
  out[0] = '\0';
  if (sqlite3_open(path, &h) == SQLITE_OK &&
      sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
      snprintf(out, sizeof out, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return out;
}

/* A case result of two checks: a pass, and (when failing) a fail with two violations. */
static void fake_result(eng_case_result *r, eng_check c[2], eng_violation v[2], int failing)
{
  memset(r, 0, sizeof *r);
  memset(c, 0, 2 * sizeof *c);
  memset(v, 0, 2 * sizeof *v);
  r->checks = c;
  r->n_checks = 2;
  r->ref_ms = 1.5;
  r->gpu_ms = -1;
  r->n_perf = 1;
  r->perf[0] = (eng_perf){ENG_REF, "forward", 2.0, 4000000};
  c[0] = (eng_check){.engine = ENG_REF, .baseline = "exact", .path = "forward",
                     .output = "output", .metric = CMP_BOUND, .status = ENG_PASS,
                     .compared = 1, .has_digest = 1, .digest = 42};
  c[0].cmp = (cmp_result){.metric = CMP_BOUND, .elements = 100, .exact = 90,
                          .worst_bound_ratio = 0.25};
  c[1] = (eng_check){.engine = ENG_ORACLE, .baseline = "ref", .path = "forward",
                     .output = "output", .metric = CMP_BITWISE, .compared = 1, .has_digest = 1,
                     .digest = failing ? 7 : 42};
  c[1].cmp = (cmp_result){.metric = CMP_BITWISE, .elements = 100, .exact = failing ? 98 : 100,
                          .max_ulp = failing ? 3 : 0, .violations = failing ? 2 : 0};
  c[1].status = failing ? ENG_FAIL : ENG_PASS;
  if (failing) {
    snprintf(c[1].reason, sizeof c[1].reason, "2 of 100 elements differ");
    v[0] = (eng_violation){{5, 1.0, 1.5, 0}, "t=0 b=1 d=1"};
    v[1] = (eng_violation){{9, 2.0, NAN, 0}, "t=0 b=2 d=1"};
    c[1].violations = v;
    c[1].n_violations = 2;
  }
}

static int64_t store_run(db *d, const char *const *cases, int ncases, int failing)
{
  db_run_info info = {.dirty = -1, .host = "h", .cpu = "c", .tool_version = "t", .argv = "a",
                      .engines = "ref,oracle", .repeats = 1};
  int64_t run = 0, case_id;
  tbe_status s = db_run_begin(d, &info, &run);
  CHECK(s.code == TBE_OK, "run_begin: %s", s.message);
  for (int i = 0; i < ncases; i++) {
    eng_case_result r;
    eng_check c[2];
    eng_violation v[2];
    fake_result(&r, c, v, failing && i == 0);
    s = db_store_case(d, run, cases[i], 0, &r, &case_id);
    CHECK(s.code == TBE_OK, "store_case: %s", s.message);
  }
  s = db_run_end(d, run);
  CHECK(s.code == TBE_OK, "run_end: %s", s.message);
  return run;
}

static int count(const char *path, const char *table)
{
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
  return atoi(raw_text(path, sql));
}

static void test_create_store_query(void)
{
  const char *p = path_in_tmp("a.db");
  db *d;
  tbe_status s = db_open(p, DB_WRITE, &d);
  CHECK(s.code == TBE_OK, "create: %s", s.message);
  if (s.code != TBE_OK)
    return;
  static const char *const cases[] = {"B=8 seed=1", "B=9 seed=1"};
  store_run(d, cases, 2, 1);
  db_table t;
  db_param all = {":all", NULL, 1};
  s = db_query(d, "failures", NULL, 0, &t);
  CHECK(s.code == TBE_OK && t.nrows == 1, "failures of the last run: %d rows (%s)", t.nrows,
        s.message);
  db_table_free(&t);
  s = db_query(d, "failures", &all, 1, &t);
  CHECK(s.code == TBE_OK && t.nrows == 4, "all results: %d rows", t.nrows);
  db_table_free(&t);
  db_param id = {":id", NULL, 2};
  s = db_query(d, "violations", &id, 1, &t);
  CHECK(s.code == TBE_OK && t.nrows == 2 && !strcmp(t.cells[1], "t=0 b=1 d=1") &&
            !strcmp(t.cells[t.ncols + 3], "NaN"),
        "violations of result 2: %d rows", t.nrows);
  db_table_free(&t);
  s = db_query(d, "summary", NULL, 0, &t);
  CHECK(s.code == TBE_OK && t.nrows == 2, "summary: %d rows", t.nrows);
  db_table_free(&t);
  char *text = NULL, hash[17];
  s = db_case_text(d, "2", &text);
  CHECK(s.code == TBE_OK && text && !strcmp(text, "B=9 seed=1"), "case 2 by id: %s", text);
  free(text);
  db_case_hash("B=8 seed=1", hash);
  s = db_case_text(d, hash, &text);
  CHECK(s.code == TBE_OK && text && !strcmp(text, "B=8 seed=1"), "case by hash: %s", text);
  free(text);
  s = db_case_text(d, "77", &text);
  CHECK(s.code == TBE_EINVAL && !text, "unknown case id accepted");
  db_close(d);

  CHECK(atoi(raw_text(p, "SELECT schema_version FROM meta")) == DB_SCHEMA_VERSION,
        "meta.schema_version is not DB_SCHEMA_VERSION: schema.sql and db.h disagree");
  CHECK(atoi(raw_text(p, "PRAGMA application_id")) == DB_APPLICATION_ID, "application_id");
  CHECK(!strcmp(raw_text(p, "PRAGMA journal_mode"), "wal"), "not in WAL mode");
  CHECK(count(p, "perf") == 2 && !strcmp(raw_text(p, "SELECT complete FROM runs"), "1"),
        "perf rows or run completion");

  /* the CHECK constraints hold */
  CHECK(raw_exec(p, "INSERT INTO results (run, case_id, repeat, engine, baseline, path, output, "
                    "metric, status) VALUES (1, 1, 0, 'ref', 'exact', 'f', 'o', 'bitwise', "
                    "'bogus')") == SQLITE_CONSTRAINT,
        "a bogus status was accepted");
  CHECK(raw_exec(p, "INSERT INTO results (run, case_id, repeat, engine, baseline, path, output, "
                    "metric, status, reason) VALUES (1, 1, 5, 'ref', 'exact', 'f', 'o', "
                    "'bitwise', 'pass', 'why')") == SQLITE_CONSTRAINT,
        "a pass with a reason (and no metrics) was accepted");
  CHECK(raw_exec(p, "UPDATE runs SET complete = 1, ended = NULL") == SQLITE_CONSTRAINT,
        "a complete run without an end was accepted");
}

/* db_open must refuse the file at p with a message containing `words`, leaving it (and its
 * directory) exactly as it was. */
static void expect_refused(const char *p, const char *words)
{
  char *before = NULL, *after = NULL;
  long n = slurp(p, &before);
  for (int mode = DB_READ; mode <= DB_WRITE; mode++) {
    db *d = NULL;
    tbe_status s = db_open(p, (db_mode)mode, &d);
    CHECK(s.code == TBE_EINVAL && !d && strstr(s.message, words),
          "%s (mode %d): code %d, message '%s', wanted '%s'", p, mode, s.code, s.message, words);
    db_close(d);
  }
  long m = slurp(p, &after);
  CHECK(n == m && n >= 0 && !memcmp(before, after, (size_t)n), "%s changed", p);
  char side[600];
  snprintf(side, sizeof side, "%s-wal", p);
  CHECK(!exists(side), "%s was created", side);
  snprintf(side, sizeof side, "%s-shm", p);
  CHECK(!exists(side), "%s was created", side);
  free(before);
  free(after);
}

static void test_refusals(void)
{
  const char *good = path_in_tmp("a.db");
  char *data;
  long n = slurp(good, &data);
  CHECK(n > 8192, "the test database is only %ld bytes", n);
  if (n <= 8192)
    return;

  const char *txt = path_in_tmp("text.db");
  spit(txt, "this is a text file, not a database\n", 36);
  expect_refused(txt, "not a SQLite database");

  const char *cut = path_in_tmp("truncated.db");
  spit(cut, data, n / 2);
  expect_refused(cut, "corrupt");

  const char *newer = path_in_tmp("newer.db");
  spit(newer, data, n);
  CHECK(raw_exec(newer, "PRAGMA journal_mode = DELETE; UPDATE meta SET schema_version = 99") ==
            SQLITE_OK,
        "cannot make the newer database");
  expect_refused(newer, "newer");

  const char *foreign = path_in_tmp("foreign.db");
  CHECK(raw_exec(foreign, "CREATE TABLE t (x)") == SQLITE_OK, "cannot make a foreign database");
  expect_refused(foreign, "not a tbecheck one");

  const char *empty = path_in_tmp("empty.db");
  spit(empty, "", 0);
  db *d = NULL;
  tbe_status s = db_open(empty, DB_READ, &d);
  CHECK(s.code == TBE_EINVAL && !d, "an empty file opened for reading");
  s = db_open(empty, DB_WRITE, &d);
  CHECK(s.code == TBE_OK, "an empty file is a new database when writing: %s", s.message);
  db_close(d);
  s = db_open(path_in_tmp("missing.db"), DB_READ, &d);
  CHECK(s.code == TBE_EINVAL && strstr(s.message, "no such database"), "missing: %s", s.message);
  CHECK(!exists(path_in_tmp("missing.db")), "reading created a database");
  free(data);
}

static void test_merge(void)
{
  static const char *const ca[] = {"B=8 seed=1", "B=9 seed=1"};
  static const char *const cb[] = {"B=9 seed=1", "B=10 seed=1"};
  db *a, *b, *c;
  const char *pa = path_in_tmp("ma.db"), *pb = path_in_tmp("mb.db"), *pc = path_in_tmp("mc.db");
  if (db_open(pa, DB_WRITE, &a).code != TBE_OK || db_open(pb, DB_WRITE, &b).code != TBE_OK ||
      db_open(pc, DB_WRITE, &c).code != TBE_OK) {
    CHECK(0, "cannot create the merge databases");
    return;
  }
  store_run(a, ca, 2, 1);
  store_run(a, ca, 1, 0);
  store_run(b, cb, 2, 1);
  store_run(c, cb, 1, 0); /* c already holds a run of its own */
  /* b's second run was killed after its first case: it never ended */
  db_run_info info = {.dirty = -1, .host = "h", .cpu = "c", .tool_version = "t", .argv = "k",
                      .engines = "ref", .repeats = 1};
  int64_t killed = 0, case_id;
  eng_case_result r;
  eng_check ch[2];
  eng_violation v[2];
  fake_result(&r, ch, v, 0);
  CHECK(db_run_begin(b, &info, &killed).code == TBE_OK &&
            db_store_case(b, killed, cb[0], 0, &r, &case_id).code == TBE_OK,
        "cannot store the killed run");
  db_close(a);
  db_close(b);
  int added = -1, open_runs = -1;
  tbe_status s = db_merge(c, pa, &added, &open_runs);
  CHECK(s.code == TBE_OK && added == 2 && open_runs == 0, "merge a: %s, %d runs, %d incomplete",
        s.message, added, open_runs);
  s = db_merge(c, pb, &added, &open_runs);
  CHECK(s.code == TBE_OK && added == 2 && open_runs == 1, "merge b: %s, %d runs, %d incomplete",
        s.message, added, open_runs);
  s = db_merge(c, pa, &added, &open_runs);
  CHECK(s.code == TBE_OK && added == 0, "merging a again added %d runs", added);
  db_close(c);
  CHECK(count(pc, "runs") == 5 && count(pc, "cases") == 3, "runs %d cases %d", count(pc, "runs"),
        count(pc, "cases"));
  CHECK(atoi(raw_text(pc, "SELECT count(*) FROM runs WHERE complete = 0")) == 1,
        "the killed run came out of the merge complete");
  CHECK(count(pc, "results") == 2 * (1 + 2 + 1 + 2 + 1), "results %d", count(pc, "results"));
  CHECK(count(pc, "violations") == 4 && count(pc, "perf") == 7, "violations %d perf %d",
        count(pc, "violations"), count(pc, "perf"));
  /* every violation still belongs to a failing result of its case */
  CHECK(atoi(raw_text(pc, "SELECT count(*) FROM violations v JOIN results r ON r.id = v.result "
                          "JOIN cases c ON c.id = r.case_id WHERE r.status = 'fail' AND "
                          "c.canonical IN ('B=8 seed=1', 'B=9 seed=1')")) == 4,
        "violations lost their results in the merge");
  CHECK(!strcmp(raw_text(pc, "PRAGMA integrity_check"), "ok"), "merged database damaged");
  /* a newer source is refused and left alone */
  CHECK(raw_exec(pb, "UPDATE meta SET schema_version = 99") == SQLITE_OK, "cannot age mb.db");
  if (db_open(pc, DB_WRITE, &c).code == TBE_OK) {
    s = db_merge(c, pb, &added, &open_runs);
    CHECK(s.code == TBE_EINVAL && strstr(s.message, "newer"), "newer source: %s", s.message);
    db_close(c);
  }
}

int main(void)
{
  test_tmpdir_make(tmp, sizeof tmp, "db_test");
  test_create_store_query();
  test_refusals();
  test_merge();
  test_tmpdir_done(tmp, test_failures);
  return TEST_MAIN_RESULT();
}
