/* cmd_results.c: the commands that read the results database: list, show, and report (a run's
 * summary, its drift across commits, speed, and the HTML page). Not the queries (reports/).
 */
#include <errno.h>
#include <getopt.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cmd_results.h"
#include "options.h"
#include "engine.h"

static const char list_usage[] =
    "usage: tbecheck list [--failed] [--run N] [--db PATH]\n"
    "Lists the results of run N (default: the last run), or only its failures and errors\n"
    "(reports/queries/failures.sql). A run the database does not hold is bad input (exit 2).\n";

static const char show_usage[] =
    "usage: tbecheck show RESULT_ID [--db PATH]\n"
    "Prints one result in full (its case, run and metrics) and its recorded violations.\n";

static const char report_usage[] =
    "usage: tbecheck report [--run N] [--since COMMIT] [--html FILE] [--db PATH]\n"
    "Prints run N (default: the last check run) and its campaign's runs (merged shards), the\n"
    "summary per engine pair and path over the campaign, the drift of each of the run's results\n"
    "against the previous execution of the same case and output (an earlier repeat, or else\n"
    "the latest earlier run): new, status changed, bits changed, metrics changed, or the same;\n"
    "then across commits (reports/queries/commit_drift.sql, perf_drift.sql): per path the worst\n"
    "error/bound ratio and the outputs whose bits changed, and per benchmark the time and GB/s\n"
    "with steps that slowed it flagged.\n"
    "  --since COMMIT  across commits, start at this commit (a hex prefix of one in the database)\n"
    "  --html FILE     write all of it, with the failures, their violations and replay commands\n"
    "                  and plots, as one self-contained HTML file (reports/html_report.py:\n"
    "                  Python with matplotlib) instead of printing it\n";


/* ---- list, show, report: reading the database ---- */

/* Row r's value of the column called name (NULL: SQL NULL, or no such column). */
static const char *cell(const db_table *t, int r, const char *name)
{
  for (int c = 0; c < t->ncols; c++)
    if (!strcmp(t->names[c], name))
      return t->cells[(int64_t)r * t->ncols + c];
  return NULL;
}

/* The record of run `run` (-1: the last run) from run.sql into *info, and its id into *id;
 * TBE_EINVAL when the database holds no such run. */
static tbe_status find_run(db *d, const char *path, long long run, db_table *info, int64_t *id)
{
  db_param p = {":run", NULL, run};
  tbe_status st = db_query(d, "run", &p, run > 0, info);
  if (st.code == TBE_OK && info->nrows == 0) {
    db_table_free(info);
    return run > 0 ? tbe_error(TBE_EINVAL, "run", -1, "%s has no run %lld", path, run)
                   : tbe_error(TBE_EINVAL, "run", -1, "%s has no run yet", path);
  }
  if (st.code == TBE_OK)
    *id = strtoll(info->cells[0], NULL, 10);
  return st;
}

int cmd_list(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB, OPT_RUN, OPT_FAILED, 0};
  cli_options o;
  int rc = parse_options(argc, argv, list_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (optind != argc)
    return usage_error(list_usage);
  db *d;
  db_table info, t;
  int64_t run = 0;
  tbe_status st = db_open(o.db_path, DB_READ, &d);
  if (st.code == TBE_OK)
    st = find_run(d, o.db_path, o.run, &info, &run);
  if (st.code == TBE_OK) {
    db_table_free(&info);
    db_param p[2] = {{":all", NULL, !o.failed_only}, {":run", NULL, run}};
    st = db_query(d, "failures", p, 2, &t);
  }
  db_close(d);
  if (st.code != TBE_OK)
    return fail_with(st);
  print_table(&t, 48);
  printf("(%d result%s)\n", t.nrows, t.nrows == 1 ? "" : "s");
  db_table_free(&t);
  return EXIT_PASS;
}

int cmd_show(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB, 0};
  cli_options o;
  int rc = parse_options(argc, argv, show_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  long long id;
  if (argc - optind != 1)
    return usage_error(show_usage);
  if (parse_int(argv[optind], 1, INT64_MAX, &id)) {
    say_error("bad result id '%s': expected an integer 1 .. 2^63-1", argv[optind]);
    return usage_error(show_usage);
  }
  db *d;
  db_table r, v;
  db_param p = {":id", NULL, id};
  tbe_status st = db_open(o.db_path, DB_READ, &d);
  if (st.code == TBE_OK)
    st = db_query(d, "result", &p, 1, &r);
  if (st.code == TBE_OK) {
    st = db_query(d, "violations", &p, 1, &v);
    if (st.code != TBE_OK)
      db_table_free(&r);
  }
  db_close(d);
  if (st.code != TBE_OK)
    return fail_with(st);
  rc = EXIT_PASS;
  if (r.nrows == 0) {
    say_error("%s has no result %lld", o.db_path, id);
    rc = EXIT_USAGE;
  } else {
    print_record(&r);
    printf("\nviolations recorded: %d\n", v.nrows);
    if (v.nrows)
      print_table(&v, 0);
  }
  db_table_free(&r);
  db_table_free(&v);
  return rc;
}

/* Prints the drift of a run's results (drift.sql): totals per kind of change, then the rows
 * that changed. */
static void print_drift(const db_table *t)
{
  static const char *const kinds[] = {"same", "new", "status", "bits", "metrics"};
  int change_col = 0;
  while (change_col < t->ncols && strcmp(t->names[change_col], "change"))
    change_col++;
  int counts[5] = {0}, changed = 0;
  for (int r = 0; r < t->nrows; r++) {
    int k = pick(t->cells[r * t->ncols + change_col], kinds, 5);
    counts[k < 0 ? 0 : k]++;
  }
  changed = counts[2] + counts[3] + counts[4];
  printf("\ndrift against the previous execution of each case (an earlier repeat or run): %d "
         "results; %d same, %d new (never run before), %d changed (%d status, %d bits, %d "
         "metrics)\n",
         t->nrows, counts[0], counts[1], changed, counts[2], counts[3], counts[4]);
  if (!changed)
    return;
  db_table shown = *t;
  shown.nrows = changed; /* drift.sql orders the changed rows first */
  putchar('\n');
  print_table(&shown, 48);
}

/* Checks that exactly one commit of the database starts with `since` (commits.sql). */
static tbe_status check_since(db *d, const char *path, const char *since)
{
  db_table t;
  db_param p = {":since", since, 0};
  tbe_status st = db_query(d, "commits", &p, 1, &t);
  if (st.code != TBE_OK)
    return st;
  const char *found = NULL;
  int distinct = 0;
  for (int r = 0; r < t.nrows; r++) { /* rows: ord, code, git_commit, ..., matches */
    const char *c = t.cells[r * t.ncols + 2], *m = t.cells[r * t.ncols + 6];
    if (m && !strcmp(m, "1") && (!found || strcmp(found, c))) {
      distinct++;
      found = c;
    }
  }
  db_table_free(&t);
  if (distinct == 1)
    return tbe_ok();
  return tbe_error(TBE_EINVAL, "since", -1,
                   distinct ? "--since %s: more than one commit of %s starts with it; give more "
                              "digits"
                            : "--since %s: no run of %s is of a commit that starts with it",
                   since, path);
}

/* Writes the HTML report of run `run` (and its campaign) into o->html: runs
 * reports/html_report.py with the Python of the oracle (eng_python), which reads the database
 * through the same queries. Returns the exit code. */
static int write_html(const cli_options *o, int64_t run)
{
  char run_text[24];
  snprintf(run_text, sizeof run_text, "%lld", (long long)run);
  char *args[] = {(char *)eng_python(), TBE_SOURCE_DIR "/reports/html_report.py",
                  "--db", (char *)o->db_path, "--run", run_text, "--out", (char *)o->html,
                  o->since ? "--since" : NULL, (char *)o->since, NULL};
  extern char **environ;
  pid_t pid;
  fflush(stdout);
  int err = posix_spawnp(&pid, args[0], NULL, NULL, args, environ);
  int status = 0;
  if (err == 0 && waitpid(pid, &status, 0) < 0)
    err = errno;
  if (err) {
    say_error("cannot run %s (the Python of TBECHECK_PYTHON): %s", args[0], strerror(err));
    return EXIT_INTERNAL;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    printf("report of run %lld written to %s\n", (long long)run, o->html);
    return EXIT_PASS;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_USAGE)
    return EXIT_USAGE;
  say_error("reports/html_report.py failed (%s %d): no report written",
            WIFEXITED(status) ? "exit" : "signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return EXIT_INTERNAL;
}

/* Prints a section of the text report: a title, then the table or a line for none. */
static void print_section(const char *title, const db_table *t, const char *none)
{
  printf("\n%s\n", title);
  if (t->nrows)
    print_table(t, 48);
  else
    printf("(%s)\n", none);
}

int cmd_report(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB, OPT_RUN, OPT_SINCE, OPT_HTML, 0};
  cli_options o;
  int rc = parse_options(argc, argv, report_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (optind != argc)
    return usage_error(report_usage);
  if (o.html && (rc = check_output_path(o.html, 0, "report")) >= 0)
    return rc;
  enum { INFO, CAMPAIGN, SUM, DRIFT, COMMITS, PERF, RACES, NTABLES };
  db *d;
  db_table t[NTABLES] = {{0}};
  int64_t run = 0;
  tbe_status st = db_open(o.db_path, DB_READ, &d);
  if (st.code == TBE_OK)
    st = find_run(d, o.db_path, o.run, &t[INFO], &run);
  if (st.code == TBE_OK && o.since)
    st = check_since(d, o.db_path, o.since);
  if (st.code == TBE_OK && !o.html) {
    db_param p[3] = {{":run", NULL, run}, {":campaign", NULL, 1}, {":since", o.since, 0}};
    static const char *const names[NTABLES] = {NULL, "campaign", "summary", "drift",
                                               "commit_drift", "perf_drift", "races"};
    for (int k = CAMPAIGN; st.code == TBE_OK && k < NTABLES; k++)
      st = db_query(d, names[k], p, 3, &t[k]);
  }
  db_close(d);
  if (st.code == TBE_OK && o.html)
    rc = write_html(&o, run);
  if (st.code == TBE_OK && !o.html) {
    print_record(&t[INFO]);
    if (t[CAMPAIGN].nrows > 1) {
      const db_table *c = &t[CAMPAIGN]; /* campaign.sql's columns, found by name */
      printf("\ncampaign %s: %d runs (shards merged)\n", cell(c, 0, "campaign"), c->nrows);
      for (int r = 0; r < c->nrows; r++) {
        const char *commit = cell(c, r, "git_commit"), *gpu = cell(c, r, "gpu");
        const char *uuid = cell(c, r, "gpu_uuid"), *done = cell(c, r, "complete");
        printf("  run %-5s shard %-6s %s on %s, %s%s%s%s, started %s, %s\n",
               cell(c, r, "run"), cell(c, r, "shard") ? cell(c, r, "shard") : "-",
               commit ? commit : "no commit", cell(c, r, "host"), gpu ? gpu : "no GPU",
               uuid ? " (" : "", uuid ? uuid : "", uuid ? ")" : "", cell(c, r, "started"),
               done && !strcmp(done, "1") ? "complete" : "incomplete");
      }
      printf("\nsummary of the campaign\n");
    }
    putchar('\n');
    print_table(&t[SUM], 0);
    if (t[RACES].nrows)
      print_section("races of the run (reports/queries/races.sql): backward launches per case "
                    "under varying schedules, distinct outcomes, launches unlike the reference",
                    &t[RACES], "");
    print_drift(&t[DRIFT]);
    print_section("numeric drift across commits (reports/queries/commit_drift.sql): per path and "
                  "code in commit order, the worst error/bound ratio and the outputs whose bits "
                  "changed against their previous execution",
                  &t[COMMITS], "no results");
    print_section("speed across commits (reports/queries/perf_drift.sql): benchmark figures, "
                  "regression flagged where a step slowed a kernel down",
                  &t[PERF], "no benchmark figures: bench/ records them with --db PATH");
    rc = EXIT_PASS;
  }
  for (int k = 0; k < NTABLES; k++)
    db_table_free(&t[k]);
  return st.code == TBE_OK ? rc : fail_with(st);
}

