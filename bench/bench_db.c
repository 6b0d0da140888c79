/* bench_db.c: a benchmark's --db: one bench run and a perf row per figure (bench_db.h).
 * Not a benchmark and not the database module (harness/store/db.c does the storing).
 */
#include "bench_db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "db.h"
#include "runinfo.h"

struct bench_db {
  db *d;
  int64_t run;
  const char *name;
};

static void bench_db_die(const char *name, tbe_status s)
{
  fprintf(stderr, "%s: results database: %s\n", name, s.message);
  exit(s.code == TBE_EINVAL ? 2 : 3);
}

bench_db *bench_db_open(int argc, char **argv, const char *name, const char *gpu)
{
  if (argc == 1)
    return NULL;
  if (argc != 3 || strcmp(argv[1], "--db") != 0 || !argv[2][0]) {
    fprintf(stderr, "usage: %s [--db PATH]   (--db: record the figures as perf rows)\n", name);
    exit(2);
  }
  bench_db *b = calloc(1, sizeof *b);
  if (!b) {
    fprintf(stderr, "%s: out of memory\n", name);
    exit(3);
  }
  b->name = name;
  tbe_status s = db_open(argv[2], DB_WRITE, &b->d);
  if (s.code != TBE_OK)
    bench_db_die(name, s);
  runinfo ri;
  runinfo_collect(&ri);
  char args[1024];
  snprintf(args, sizeof args, "%s --db %s", name, argv[2]);
  db_run_info info = {
    .git_commit = ri.git_commit[0] ? ri.git_commit : NULL,
    .dirty = ri.dirty,
    .host = ri.host,
    .cpu = ri.cpu[0] ? ri.cpu : "unknown",
    .gpu = gpu,
    .driver = ri.driver[0] ? ri.driver : NULL,
    .cuda = TBE_CUDA_VERSION[0] ? TBE_CUDA_VERSION : NULL,
    .tool_version = TBE_VERSION,
    .argv = args,
    .engines = gpu ? "gpu" : "ref",
    .repeats = 1,
    .bench = name,
  };
  s = db_run_begin(b->d, &info, &b->run);
  if (s.code != TBE_OK)
    bench_db_die(name, s);
  return b;
}

void bench_db_figure(bench_db *b, const char *shape, const char *case_text, const char *kernel,
                     const char *config, double ms, double bytes, double ceiling_gbps)
{
  if (!b)
    return;
  tbe_case *c;
  tbe_status s = case_parse(case_text, &c);
  char canonical[1024];
  if (s.code == TBE_OK) {
    case_format(c, canonical, sizeof canonical);
    case_free(c);
    db_perf_row row = {shape, canonical, kernel, config, 0, ms, (int64_t)bytes, ceiling_gbps};
    s = db_store_perf_row(b->d, b->run, &row);
  }
  if (s.code != TBE_OK)
    bench_db_die(b->name, s);
}

void bench_db_close(bench_db *b)
{
  if (!b)
    return;
  tbe_status s = db_run_end(b->d, b->run);
  db_close(b->d);
  if (s.code != TBE_OK)
    bench_db_die(b->name, s);
  free(b);
}
