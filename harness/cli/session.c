/* session.c: what run, import and replay share: the engines opened once, an injected fault's
 * landing, the memory check, the run session (database, progress, summary), case lists. Not a
 * command (cmd_*.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session.h"
#include "footprint.h"
#include "runinfo.h"

/* ---- engines, the fault and the memory check: shared by run, import, replay, export ---- */

/* Opens the engines and prints what cannot run here, once. A fault (--inject-fault) aimed at an
 * engine that does not run is bad usage: it would land nowhere. Returns -1 or an exit code;
 * *x must be closed either way. */
int open_engines(const cli_options *o, eng_ctx **x)
{
  tbe_status st = eng_open(&o->eng, x);
  if (st.code != TBE_OK)
    return fail_with(st);
  for (int e = 0; e < ENG_COUNT; e++) {
    const char *why = eng_unavailable(*x, (eng_id)e);
    if ((o->eng.engines & (1u << e)) && why)
      printf("engine %s: skip (%s)\n", eng_name((eng_id)e), why);
  }
  fflush(stdout);
  const eng_options *f = &o->eng;
  const char *why = f->fault_output[0] ? eng_unavailable(*x, f->fault_engine) : NULL;
  if (!why)
    return -1;
  if (o->eng.engines & (1u << f->fault_engine))
    say_error("--inject-fault %s:%s lands nowhere: engine %s does not run here (%s)",
              eng_name(f->fault_engine), f->fault_output, eng_name(f->fault_engine), why);
  else
    say_error("--inject-fault %s:%s lands nowhere: engine %s is not among --engines",
              eng_name(f->fault_engine), f->fault_output, eng_name(f->fault_engine));
  return EXIT_USAGE;
}


void fault_note(fault_seen *f, const eng_case_result *r)
{
  f->landed |= r->fault_landed;
  if (r->fault_elements > f->most)
    f->most = r->fault_elements;
}

/* Exit 2 when o asked for a fault and it landed in no case (it would have tested nothing). */
int fault_check(const cli_options *o, const fault_seen *f)
{
  const eng_options *e = &o->eng;
  if (!e->fault_output[0] || f->landed)
    return -1;
  if (f->most <= 0)
    say_error("--inject-fault %s:%s@%lld landed nowhere: %s produced no '%s' in any case",
              eng_name(e->fault_engine), e->fault_output, (long long)e->fault_index,
              eng_name(e->fault_engine), e->fault_output);
  else
    say_error("--inject-fault %s:%s@%lld landed nowhere: '%s' of %s has at most %lld elements "
              "here (@0..@%lld)", eng_name(e->fault_engine), e->fault_output,
              (long long)e->fault_index, e->fault_output, eng_name(e->fault_engine),
              (long long)f->most, (long long)f->most - 1);
  return EXIT_USAGE;
}

/* Refuses (exit 2) a case whose estimated memory (footprint.h) is more than this machine has
 * for it: MemAvailable or the cgroup's limit, or --max-memory. The kernel would kill it. */
int check_memory(const tbe_case *c, const char *canon, const cli_options *o)
{
  footprint f;
  footprint_case(c, (o->eng.engines >> ENG_GPU) & 1u, &f);
  const char *source = "--max-memory";
  int64_t avail = o->max_memory ? o->max_memory : runinfo_memory_available(&source);
  if (avail < 0 || f.host <= avail)
    return -1;
  char need[32], have[32];
  say_error("case '%.200s' needs about %s of host memory (estimated from its shape), more than "
            "the %s available (%s); run a smaller case, or set the limit with --max-memory SIZE",
            canon, human_bytes(f.host, need), human_bytes(avail, have), source);
  return EXIT_USAGE;
}

/* ---- a run session: database, engines, progress, shared by run and import ---- */


/* The run row of s (db_run_begin): the machine, the build and the command line. */
static int session_begin_run(session *s)
{
  const cli_options *o = s->o;
  runinfo ri;
  runinfo_collect(&ri);
  char engines[256], shard[48], versions[1024];
  eng_describe_external(s->x, versions, sizeof versions);
  eng_format_list(o->eng.engines, engines, sizeof engines);
  snprintf(shard, sizeof shard, "%lld/%lld", o->shard_i, o->shard_n);
  char campaign[17];
  if (o->campaign_cases) /* the shards of one command line, on one commit */
    snprintf(campaign, sizeof campaign, "%016llx",
             (unsigned long long)eng_fnv1a(o->campaign_cases, ri.git_commit,
                                           strlen(ri.git_commit)));
  db_run_info info = {
    .git_commit = ri.git_commit[0] ? ri.git_commit : NULL,
    .dirty = ri.dirty,
    .host = ri.host,
    .cpu = ri.cpu[0] ? ri.cpu : "unknown",
    .gpu = eng_gpu_description(s->x)[0] ? eng_gpu_description(s->x) : NULL,
    .driver = ri.driver[0] ? ri.driver : NULL,
    .cuda = TBE_CUDA_VERSION[0] ? TBE_CUDA_VERSION : NULL,
    .tool_version = TBE_VERSION,
    .argv = s->argv_text ? s->argv_text : "?",
    .engines = engines,
    .shard = o->shard_n ? shard : NULL,
    .repeats = o->repeat,
    .injected = o->eng.fault_output[0] != '\0',
    .campaign = o->campaign ? o->campaign : o->campaign_cases ? campaign : NULL,
    .engine_versions = versions[0] ? versions : NULL,
    /* set by run --gpus for its workers (gpus.c): the device behind CUDA_VISIBLE_DEVICES */
    .gpu_uuid = getenv("TBECHECK_GPU_UUID") && *getenv("TBECHECK_GPU_UUID")
                    ? getenv("TBECHECK_GPU_UUID")
                    : NULL,
  };
  tbe_status st = db_run_begin(s->d, &info, &s->run);
  return st.code == TBE_OK ? -1 : fail_with(st);
}

int session_open(session *s, const cli_options *o, int argc, char **argv, int64_t total)
{
  memset(s, 0, sizeof *s);
  s->o = o;
  s->fault.most = -1;
  s->hold = o->eng.fault_output[0] != '\0';
  int rc = open_engines(o, &s->x);
  if (rc >= 0)
    return rc;
  s->created = access(o->db_path, F_OK) != 0;
  tbe_status st = db_open(o->db_path, DB_WRITE, &s->d);
  if (st.code != TBE_OK)
    return fail_with(st);
  s->argv_text = quote_argv(argc, argv);
  if (!s->hold && (rc = session_begin_run(s)) >= 0)
    return rc;
  s->live = isatty(STDOUT_FILENO);
  progress_start(&s->prog, total, eng_now_ms());
  return -1;
}

static void session_redraw(const session *s)
{
  char line[160];
  progress_format(&s->prog, eng_now_ms(), line, sizeof line);
  printf("\r\033[K%s", line);
  fflush(stdout);
}

/* Stores one case's result and prints it: a line per case (plain, or a failure on a terminal)
 * with the reasons of its failures. Returns -1 to go on, or an exit code. */
static int session_store(session *s, const char *canon, int repeat, const eng_case_result *r)
{
  int64_t case_id = 0;
  tbe_status st = db_store_case(s->d, s->run, canon, repeat, r, &case_id);
  if (st.code != TBE_OK) {
    if (s->live)
      printf("\r\033[K");
    fflush(stdout);
    say_error("cannot store case '%s': %s", canon, st.message);
    say_error("run %lld stays incomplete; the cases stored before this one are kept",
              (long long)s->run);
    return EXIT_INTERNAL;
  }
  int failed = eng_case_failed(r);
  s->failed += failed;
  if (s->live && !failed)
    return -1;
  if (s->live)
    printf("\r\033[K");
  printf("%-4s  case %-5lld %s%s\n", failed ? "FAIL" : "pass", (long long)case_id, canon,
         repeat ? " (repeat)" : "");
  for (int i = 0; failed && i < r->n_checks; i++) {
    const eng_check *c = &r->checks[i];
    if (c->status == ENG_FAIL || c->status == ENG_ERROR)
      printf("      %s:%s %s %s: %s: %s\n", eng_name(c->engine), c->baseline, c->path, c->output,
             eng_status_name(c->status), c->reason);
  }
  fflush(stdout);
  return -1;
}

/* Ends the hold once the fault has landed: the run row and what was held are stored, and
 * the run goes on storing case by case. -1 or an exit code. */
static int session_release(session *s)
{
  int rc = session_begin_run(s);
  for (int64_t i = 0; rc < 0 && i < s->held.n; i++)
    rc = session_store(s, s->held.v[i].canon, s->held.v[i].repeat, &s->held.v[i].r);
  s->hold = 0;
  return rc;
}

int session_case(session *s, const char *canon, int repeat, eng_case_result *r)
{
  progress_step(&s->prog, eng_case_failed(r));
  fault_note(&s->fault, r);
  int rc = -1;
  if (s->hold && s->fault.landed && (rc = session_release(s)) >= 0)
    return rc;
  if (s->hold) {
    if (held_push(&s->held, canon, repeat, r)) {
      say_error("out of memory holding the result of case '%s'", canon);
      return EXIT_INTERNAL;
    }
  } else {
    rc = session_store(s, canon, repeat, r);
  }
  if (rc < 0 && s->live)
    session_redraw(s);
  return rc;
}

/* Leaves the database as it was before a refused held run: a file this session created goes,
 * with SQLite's companions. */
static void session_unmake(session *s)
{
  db_close(s->d);
  s->d = NULL;
  if (s->created)
    db_remove_files(s->o->db_path);
}

int session_close(session *s, int64_t cases, int repeats)
{
  if (s->live)
    printf("\r\033[K");
  int rc = -1;
  if (s->hold) { /* the fault has landed in no case */
    rc = fault_check(s->o, &s->fault);
    say_error("nothing was stored: a run whose fault lands nowhere tested nothing");
    session_unmake(s);
    return rc;
  }
  tbe_status st = db_run_end(s->d, s->run);
  db_table t;
  db_param p = {":run", NULL, s->run};
  if (st.code == TBE_OK)
    st = db_query(s->d, "summary", &p, 1, &t);
  if (st.code != TBE_OK)
    return fail_with(st);
  char count[96];
  if (repeats > 1)
    snprintf(count, sizeof count, "%lld case%s x %d repeats = %lld case runs", (long long)cases,
             cases == 1 ? "" : "s", repeats, (long long)s->prog.done);
  else
    snprintf(count, sizeof count, "%lld case%s", (long long)cases, cases == 1 ? "" : "s");
  printf("\nrun %lld: %s, %lld failed; results in %s\n\n", (long long)s->run, count,
         (long long)s->failed, s->o->db_path);
  print_table(&t, 0);
  db_table_free(&t);
  if (cases == 0)
    printf("warning: no case ran (the case files hold none%s)\n",
           s->o->shard_n ? ", or this shard got none" : "");
  for (int e = 0; e < ENG_COUNT; e++) {
    const char *why = eng_unavailable(s->x, (eng_id)e);
    if ((s->o->eng.engines & (1u << e)) && why)
      printf("warning: engine %s did not run (%s): nothing was held to it, and its skips are "
             "not passes\n", eng_name((eng_id)e), why);
  }
  fflush(stdout);
  rc = fault_check(s->o, &s->fault);
  return rc >= 0 ? rc : s->failed ? EXIT_FAILURES : EXIT_PASS;
}

void session_free(session *s)
{
  eng_close(s->x);
  db_close(s->d);
  held_free(&s->held);
  free(s->argv_text);
}

/* ---- run ---- */


/* Parses one case text, naming `where` in errors; appends it to *v. Returns -1 or exit code. */
int add_case(const char *text, const char *where, parsed_case **v, int64_t *n)
{
  tbe_case *c;
  tbe_status st = case_parse(text, &c);
  if (st.code != TBE_OK) {
    say_error("%s: bad case (key '%s'): %s", where, st.field, st.message);
    return EXIT_USAGE;
  }
  int len = case_format(c, NULL, 0);
  char *canon = malloc((size_t)len + 1);
  parsed_case *p = realloc(*v, sizeof *p * (size_t)(*n + 1));
  if (!canon || !p) {
    free(canon);
    case_free(c);
    if (p)
      *v = p;
    say_error("out of memory");
    return EXIT_INTERNAL;
  }
  case_format(c, canon, (size_t)len + 1);
  *v = p;
  p[*n] = (parsed_case){c, canon};
  ++*n;
  return -1;
}

/* Reads and parses every case of the arguments. Returns -1 or an exit code. */
int collect_cases(int argc, char **argv, parsed_case **v, int64_t *n)
{
  int piped = 0;
  for (int a = 0; a < argc; a++) {
    if (!strcmp(argv[a], "-") && piped++) {
      say_error("'-' (the cases on standard input) is given twice: it can be read once");
      return EXIT_USAGE;
    }
    if (is_case_text(argv[a])) {
      int rc = add_case(argv[a], "argument", v, n);
      if (rc >= 0)
        return rc;
      continue;
    }
    case_list cl;
    tbe_status st = case_file_read(argv[a], &cl);
    if (st.code != TBE_OK)
      return fail_with(st);
    int rc = -1;
    for (int i = 0; rc < 0 && i < cl.count; i++) {
      char where[600];
      snprintf(where, sizeof where, "%s:%d", strcmp(argv[a], "-") ? argv[a] : "stdin",
               cl.lines[i].line);
      rc = add_case(cl.lines[i].text, where, v, n);
    }
    case_list_free(&cl);
    if (rc >= 0)
      return rc;
  }
  return -1;
}

void free_cases(parsed_case *v, int64_t n)
{
  for (int64_t i = 0; i < n; i++) {
    case_free(v[i].c);
    free(v[i].canon);
  }
  free(v);
}

