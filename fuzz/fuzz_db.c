/* fuzz_db.c: libFuzzer target for opening a results database (harness/store/db.c): the input is the
 * database file. Read or write, it is refused with a clean error (and left byte for byte
 * unchanged) or opened; an opened one answers the queries and, opened for writing, stores a
 * run with one case; nothing crashes. Not the database tests (harness/store/db_test.c, cli_test.py).
 */
#include <string.h>
#include <unistd.h>

#include "db.h"
#include "fuzz.h"

/* Removes the database and SQLite's files beside it. */
static void remove_db(const char *path)
{
  char p[400];
  unlink(path);
  snprintf(p, sizeof p, "%s-wal", path);
  unlink(p);
  snprintf(p, sizeof p, "%s-shm", path);
  unlink(p);
  snprintf(p, sizeof p, "%s-journal", path);
  unlink(p);
}

/* The file at path still holds exactly data[0..size)? */
static int unchanged(const char *path, const uint8_t *data, size_t size)
{
  size_t n;
  uint8_t *now = fuzz_read_file(path, &n);
  int same = now && n == size && (!size || !memcmp(now, data, size));
  free(now);
  return same;
}

/* Queries an open database; errors are fine (a damaged page may show only now), crashes not. */
static void read_some(db *d)
{
  static const char *const queries[] = {"summary", "failures", "run", "drift", "worst"};
  for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++) {
    db_param p[2] = {{":run", NULL, 1}, {":all", NULL, 1}};
    db_table t;
    if (db_query(d, queries[i], p, 2, &t).code == TBE_OK)
      db_table_free(&t);
  }
  char *text;
  if (db_case_text(d, "1", &text).code == TBE_OK)
    free(text);
}

/* Stores a run of one case with one passing check. */
static void write_some(db *d)
{
  db_run_info info = {.git_commit = "fuzz", .host = "fuzz", .cpu = "fuzz", .tool_version = "0",
                      .argv = "fuzz", .engines = "ref", .repeats = 1};
  eng_check c = {.engine = ENG_REF, .baseline = "exact", .path = "forward", .output = "output",
                 .metric = CMP_BOUND, .status = ENG_PASS, .compared = 1};
  c.cmp.metric = CMP_BOUND;
  c.cmp.elements = 4;
  eng_case_result r = {.checks = &c, .n_checks = 1, .cap_checks = 1, .ref_ms = 1, .gpu_ms = -1};
  int64_t run, case_id;
  if (db_run_begin(d, &info, &run).code != TBE_OK)
    return;
  if (db_store_case(d, run, "T=2 seed=3", 0, &r, &case_id).code == TBE_OK)
    db_run_end(d, run);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char path[300];
  fuzz_path(path, sizeof path, "results.db");
  for (int mode = DB_READ; mode <= DB_WRITE; mode++) {
    remove_db(path);
    fuzz_write_file(path, data, size);
    db *d;
    tbe_status s = db_open(path, (db_mode)mode, &d);
    if (s.code != TBE_OK) {
      FUZZ_CHECK((s.code == TBE_EINVAL || s.code == TBE_EIO) && s.message[0] && !d,
                 "db_open refused with %s: %s", tbe_code_name(s.code), s.message);
      FUZZ_CHECK(unchanged(path, data, size), "a refused database was changed (%s): %s",
                 mode == DB_READ ? "read" : "write", s.message);
      continue;
    }
    read_some(d);
    if (mode == DB_WRITE)
      write_some(d);
    db_close(d);
    if (mode == DB_READ)
      FUZZ_CHECK(unchanged(path, data, size), "opening a database to read changed it");
  }
  remove_db(path);
  return 0;
}
