/* tbecheck.c: the command line: run cases through the engines into the results database, and
 * replay, list, show, report, merge, import, export. Not library code: this is the one place
 * that prints and chooses exit codes; everything it does is a call into harness/.
 *
 * Exit codes, one rule for every command: 0 all passed, 1 failures found, 2 bad usage or bad
 * input (what the command was given is wrong, missing or not what it must be: options, cases,
 * case files, .npy files, a database or a run or result that does not exist, a fault that
 * lands nowhere, a case too big for this machine), 3 I/O or internal error while it worked
 * (a write that failed, a full disk, out of memory). A command ends on the first exit code
 * above 1; bad input is found before anything is written wherever it can be.
 * To add a command: its usage text, a cmd_ function, and one line in `commands` (main).
 */
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dirent.h>
#include <errno.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "case.h"
#include "db.h"
#include "engine.h"
#include "export.h"
#include "footprint.h"
#include "gen.h"
#include "fuzz_campaign.h"
#include "import.h"
#include "progress.h"
#include "race.h"
#include "runinfo.h"
#include "shard.h"

enum { EXIT_PASS = 0, EXIT_FAILURES = 1, EXIT_USAGE = 2, EXIT_INTERNAL = 3 };

#define DEFAULT_DB "tbecheck.db"
#define DEFAULT_ENGINES "ref,gpu,oracle"
#define DEFAULT_MAX_VIOLATIONS 10

static const char usage_text[] =
    "usage: tbecheck <command> [options] [arguments]      (tbecheck <command> --help)\n"
    "\n"
    "commands:\n"
    "  run [CASEFILE|CASE ...]    run cases through the engines, compare, store every outcome\n"
    "  replay ID|CASE             rerun one case: each comparison and its first violations\n"
    "  list [--failed] [--run N]  results of a run (default: the last)\n"
    "  show RESULT_ID             one result in full, with its violations\n"
    "  report [--run N] [--html FILE]  a run's summary, drift across commits, speed\n"
    "  import DIR                 run a captured batch given as .npy files\n"
    "  export CASE|CASEFILE DIR   write a case's inputs and reference outputs as .npy files\n"
    "  merge OUT.db IN.db ...     fold databases (e.g. shards) into one\n"
    "  random N SEED              print N random valid cases (--path small: of the small-table\n"
    "                             path alone)\n"
    "  --version                  version, commit, build type, CUDA on or off, planted fault\n"
    "  fuzz [--seconds S]         differential campaign over the edge space, failures shrunk\n"
    "  race [--seconds S]         the GPU backward launched again and again under varying\n"
    "                             schedules, every launch held to the reference's bits\n"
    "\n"
    "A CASE is one line of key=value tokens (README.md), quoted as one argument; an argument\n"
    "without '=' is a case file (one case per line, '#' comments). The database is\n"
    "./" DEFAULT_DB " unless --db says otherwise; run and import create it.\n"
    "\n"
    "engines: ref (the CPU reference; always runs, it is the baseline), gpu (CUDA), oracle\n"
    "(NumPy). Normative outputs are compared bit for bit with ref; others (the GPU small-table\n"
    "path) with the exact forward within the derived bound. An engine that cannot run here is\n"
    "recorded as skip, with the reason, never as pass.\n"
    "\n"
    "environment: TBECHECK_PYTHON  the Python interpreter of the oracle engine\n"
    "\n"
    "exit codes: 0 all passed (skips do not fail), 1 failures found, 2 bad usage or bad\n"
    "            input (options, cases, files or databases that are missing or wrong, a run or\n"
    "            result that does not exist, a case too big for this machine), 3 I/O or\n"
    "            internal error while working (a failed write, a full disk)\n";

static const char run_usage[] =
    "usage: tbecheck run [CASEFILE|CASE ...] [--db PATH] [--engines LIST] [--repeat N]\n"
    "                    [--shard I/N|auto] [--campaign ID] [--max-violations N]\n"
    "                    [--inject-fault ENGINE:OUTPUT] [--max-memory SIZE]\n"
    "Runs every case through the engines, compares each engine output with its baseline and\n"
    "stores the outcome in the database, one transaction per case; ends with a summary per\n"
    "engine pair and path, and a warning for each engine that could not run here. All cases\n"
    "are parsed, and their memory estimated, before anything runs.\n"
    "  --db PATH              results database (default ./" DEFAULT_DB ")\n"
    "  --engines LIST         comma-separated, from ref,gpu,oracle (default all; ref always)\n"
    "  --repeat N             run each case N times (flaky outputs show in flaky.sql)\n"
    "  --shard I/N            run only cases I, I+N, I+2N, ... (1-based) of the list; auto:\n"
    "                         I/N from Slurm (the job array's task, or SLURM_PROCID/NTASKS)\n"
    "  --campaign ID          the campaign the run belongs to (letters, digits, . _ : -; at\n"
    "                         most 64): merged shards of one campaign report as one. Default\n"
    "                         with --shard: derived from the commit, N, the engines, the repeats\n"
    "                         and every case, so the shards of one command line agree\n"
    "  --max-violations N     violations stored per result (default 10)\n"
    "  --inject-fault E:O[@I] test the tester: move element I (default 0) of engine E's\n"
    "                         output O by one ulp (integers: by one); the run must then fail.\n"
    "                         The run is marked injected (kept out of drift, flaky, worst);\n"
    "                         a fault that lands in no case is bad usage (exit 2)\n"
    "  --max-memory SIZE      memory a case may need (bytes, or with K, M, G, T); default:\n"
    "                         what this machine has available (MemAvailable, cgroup limit)\n"
    "Exit 0 all passed, 1 failures, 2 bad input, 3 I/O error (the run stays incomplete).\n";

static const char replay_usage[] =
    "usage: tbecheck replay ID|CASE [--db PATH] [--engines LIST] [--max-violations N]\n"
    "                       [--inject-fault ENGINE:OUTPUT] [--max-memory SIZE]\n"
    "Reruns one case (a case text, or the id or hash of a case in the database) and prints every\n"
    "comparison in detail with its first violations at their coordinates: (t, b, d) for pooled\n"
    "outputs, (p, d) for pooling NONE, p for indices, bag for offsets. Stores nothing.\n"
    "Exit 0 all passed, 1 failures, 2 bad input, 3 I/O error.\n";

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

static const char import_usage[] =
    "usage: tbecheck import DIR [--pool sum|mean|none] [--out fp32|fp16|bf16]\n"
    "                       [--bounds fatal|warning|ignore|none] [--db PATH] [--engines LIST]\n"
    "                       [--max-violations N] [--inject-fault ENGINE:OUTPUT]\n"
    "Runs a captured batch given as .npy files in DIR (harness/store/import.h: weights, E, D,\n"
    "indices and offsets required; table_offset, feature_table_map, B_vbe, per_sample_weights\n"
    "optional) through the engines and stores it as a run of one case, named by a digest of the\n"
    "files. Defaults: --pool sum --out fp32 --bounds warning. README.md lists the files.\n";

static const char export_usage[] =
    "usage: tbecheck export CASE|CASEFILE DIR [--force] [--max-memory SIZE]\n"
    "Writes a case's inputs and the reference's results as .npy files and manifest.json into\n"
    "DIR (a case file: one case per DIR/NNNN), for the NumPy oracle or another system. Every\n"
    "case is parsed and its memory estimated before anything is written. DIR must be empty or\n"
    "new; --force first removes an earlier export there (its .npy files, manifest.json and\n"
    "NNNN directories) and refuses a directory that holds anything else.\n";

static const char merge_usage[] =
    "usage: tbecheck merge OUT.db IN.db ...\n"
    "Copies into OUT.db (created if missing) every run of each IN.db that it does not hold yet,\n"
    "with its results; merging the same file twice adds nothing.\n";

static const char random_usage[] =
    "usage: tbecheck random N SEED [--path small]   (integers 0 .. 2^63-1)\n"
    "  --path small: only cases whose every feature takes the small-table tensor-core path\n";

/* ---- small helpers ---- */

static const char *command_name = "tbecheck";

static void say_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say_error(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tbecheck %s: ", command_name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* Prints a failed status and returns its exit code: bad input 2, anything else 3. */
static int fail_with(tbe_status s)
{
  say_error("%s", s.message);
  return s.code == TBE_EINVAL ? EXIT_USAGE : EXIT_INTERNAL;
}

static int usage_error(const char *usage)
{
  fputs(usage, stderr);
  return EXIT_USAGE;
}

/* Parses a decimal integer in [lo, hi] (no sign, no blanks, nothing past the range of long
 * long); 0 on success. */
static int parse_int(const char *s, long long lo, long long hi, long long *v)
{
  char *end;
  if (!*s || strspn(s, "0123456789") != strlen(s))
    return -1;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno == ERANGE || *end || x < lo || x > hi)
    return -1;
  *v = x;
  return 0;
}

/* Parses a byte count: digits, optionally followed by K, M, G or T (powers of 1024). */
static int parse_size(const char *s, long long *v)
{
  static const char units[] = "KMGT";
  size_t n = strlen(s);
  const char *u = n ? strchr(units, s[n - 1]) : NULL;
  char digits[32];
  if (n == 0 || n - (u != NULL) >= sizeof digits)
    return -1;
  memcpy(digits, s, n - (u != NULL));
  digits[n - (u != NULL)] = '\0';
  long long x;
  int shift = u ? 10 * (int)(u - units + 1) : 0;
  if (parse_int(digits, 1, INT64_MAX >> shift, &x))
    return -1;
  *v = x << shift;
  return 0;
}

/* A byte count for people: "38.4 GB" (powers of 1000, as free and top print them). */
static const char *human_bytes(int64_t n, char buf[32])
{
  static const char *const units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  double x = (double)n;
  int u = 0;
  while (x >= 1000 && u < 6) {
    x /= 1000;
    u++;
  }
  snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", x, units[u]);
  return buf;
}

static int is_case_text(const char *arg) { return strchr(arg, '=') != NULL; }

/* The command line, shell-quoted, into a malloc'd string. */
static char *quote_argv(int argc, char **argv)
{
  size_t n = 1;
  for (int i = 0; i < argc; i++)
    n += 4 * strlen(argv[i]) + 3;
  char *s = malloc(n), *p = s;
  if (!s)
    return NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int plain = *a && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                "0123456789_./:=,+-") == strlen(a);
    if (i)
      *p++ = ' ';
    if (!plain)
      *p++ = '\'';
    for (; *a; a++) {
      if (*a == '\'' && !plain) {
        memcpy(p, "'\\''", 4);
        p += 4;
      } else {
        *p++ = *a;
      }
    }
    if (!plain)
      *p++ = '\'';
  }
  *p = '\0';
  return s;
}

/* Prints a query's rows as an aligned table; cells wider than max_width (0: no limit) are cut. */
static void print_table(const db_table *t, int max_width)
{
  int *w = calloc((size_t)t->ncols + 1, sizeof *w);
  if (!w)
    return;
  for (int c = 0; c < t->ncols; c++) {
    w[c] = (int)strlen(t->names[c]);
    for (int r = 0; r < t->nrows; r++) {
      const char *v = t->cells[r * t->ncols + c];
      int len = v ? (int)strlen(v) : 1;
      if (len > w[c])
        w[c] = len;
    }
    if (max_width && w[c] > max_width)
      w[c] = max_width;
  }
  for (int r = -1; r < t->nrows; r++) {
    for (int c = 0; c < t->ncols; c++) {
      const char *v = r < 0 ? t->names[c] : t->cells[r * t->ncols + c];
      v = v ? v : "-";
      int len = (int)strlen(v), last = c == t->ncols - 1;
      if (len > w[c])
        printf("%.*s...%s", w[c] - 3, v, last ? "" : "  ");
      else
        printf("%-*s%s", last ? 0 : w[c], v, last ? "" : "  ");
    }
    putchar('\n');
  }
  free(w);
}

/* Prints the one row of t as "name: value" lines. */
static void print_record(const db_table *t)
{
  for (int c = 0; t->nrows > 0 && c < t->ncols; c++)
    printf("%-18s %s\n", t->names[c], t->cells[c] ? t->cells[c] : "-");
}

/* ---- options shared by the commands that run engines ---- */

typedef struct {
  const char *db_path;
  eng_options eng;
  int repeat;
  long long shard_i, shard_n; /* 0/0: no sharding */
  long long run;              /* --run, or -1 */
  int failed_only;
  import_options imp;
  int force;                  /* export --force */
  long long max_memory;       /* --max-memory, or 0: what the machine has available */
  const char *campaign;       /* run --campaign, or NULL */
  uint64_t campaign_cases;    /* run --shard without --campaign: FNV-1a of the whole case list */
  const char *since;          /* report --since, or NULL */
  const char *html;           /* report --html, or NULL */
  int small_path;             /* random --path small */
} cli_options;

enum {
  OPT_DB = 1000, OPT_ENGINES, OPT_REPEAT, OPT_SHARD, OPT_MAXV, OPT_FAULT, OPT_RUN, OPT_FAILED,
  OPT_POOL, OPT_OUT, OPT_BOUNDS, OPT_FORCE, OPT_MAXMEM, OPT_CAMPAIGN, OPT_SINCE, OPT_HTML,
  OPT_PATH, OPT_HELP
};

static const struct option all_options[] = {
  {"db", required_argument, 0, OPT_DB},
  {"engines", required_argument, 0, OPT_ENGINES},
  {"repeat", required_argument, 0, OPT_REPEAT},
  {"shard", required_argument, 0, OPT_SHARD},
  {"max-violations", required_argument, 0, OPT_MAXV},
  {"inject-fault", required_argument, 0, OPT_FAULT},
  {"run", required_argument, 0, OPT_RUN},
  {"failed", no_argument, 0, OPT_FAILED},
  {"pool", required_argument, 0, OPT_POOL},
  {"out", required_argument, 0, OPT_OUT},
  {"bounds", required_argument, 0, OPT_BOUNDS},
  {"force", no_argument, 0, OPT_FORCE},
  {"max-memory", required_argument, 0, OPT_MAXMEM},
  {"campaign", required_argument, 0, OPT_CAMPAIGN},
  {"since", required_argument, 0, OPT_SINCE},
  {"html", required_argument, 0, OPT_HTML},
  {"path", required_argument, 0, OPT_PATH},
  {"help", no_argument, 0, OPT_HELP},
  {0, 0, 0, 0},
};

/* Finds a name in a table of names indexed by enum value; -1 if absent. */
static int pick(const char *s, const char *const *names, int count)
{
  for (int i = 0; i < count; i++)
    if (!strcmp(s, names[i]))
      return i;
  return -1;
}

/* Parses the options of a command that accepts those in `allowed` (a string of OPT_* values).
 * Returns -1 to go on (positional arguments from optind), or an exit code. */
static int parse_options(int argc, char **argv, const char *usage, const int *allowed,
                         cli_options *o)
{
  memset(o, 0, sizeof *o);
  o->db_path = DEFAULT_DB;
  o->repeat = 1;
  o->run = -1;
  o->eng.max_violations = DEFAULT_MAX_VIOLATIONS;
  o->imp = (import_options){TBE_POOL_SUM, TBE_FP32, TBE_BOUNDS_WARNING};
  const char *engines = DEFAULT_ENGINES;
  static const char *const pools[] = {"sum", "mean", "none"};
  static const char *const dtypes[] = {"fp32", "fp16", "bf16"};
  static const char *const modes[] = {"fatal", "warning", "ignore", "none"};
  optind = 1;
  opterr = 0;
  int ch, which = -1;
  while ((ch = getopt_long(argc, argv, ":", all_options, &which)) != -1) {
    int ok = 0;
    for (const int *a = allowed; *a; a++)
      ok |= *a == ch;
    if (ch == OPT_HELP) {
      fputs(usage, stdout);
      return EXIT_PASS;
    }
    if (ch == '?' || ch == ':' || !ok) {
      say_error("%s option '%s'", ch == ':' ? "missing the value of" : "unknown",
                argv[optind - 1]);
      return usage_error(usage);
    }
    long long v = 0;
    int bad = 0, k;
    switch (ch) {
    case OPT_DB: o->db_path = optarg; break;
    case OPT_ENGINES: engines = optarg; break;
    case OPT_REPEAT:
      bad = parse_int(optarg, 1, 1000000, &v);
      o->repeat = (int)v;
      break;
    case OPT_SHARD: {
      char why[256];
      if (shard_parse(optarg, getenv, &o->shard_i, &o->shard_n, why, sizeof why)) {
        say_error("%s", why);
        return usage_error(usage);
      }
      break;
    }
    case OPT_MAXV:
      bad = parse_int(optarg, 0, 1000000, &v);
      o->eng.max_violations = (int)v;
      break;
    case OPT_FAULT: {
      tbe_status s = eng_parse_fault(optarg, &o->eng);
      if (s.code != TBE_OK)
        return fail_with(s);
      break;
    }
    case OPT_RUN: bad = parse_int(optarg, 1, INT64_MAX, &o->run); break;
    case OPT_FAILED: o->failed_only = 1; break;
    case OPT_FORCE: o->force = 1; break;
    case OPT_MAXMEM: bad = parse_size(optarg, &o->max_memory); break;
    case OPT_CAMPAIGN:
      o->campaign = optarg;
      bad = !*optarg || strlen(optarg) > 64 ||
            strspn(optarg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") !=
                strlen(optarg);
      break;
    case OPT_SINCE:
      o->since = optarg;
      bad = strlen(optarg) < 4 || strlen(optarg) > 40 ||
            strspn(optarg, "0123456789abcdef") != strlen(optarg);
      break;
    case OPT_HTML:
      o->html = optarg;
      bad = !*optarg;
      break;
    case OPT_PATH:
      bad = strcmp(optarg, "small") != 0;
      o->small_path = !bad;
      break;
    case OPT_POOL:
      bad = (k = pick(optarg, pools, 3)) < 0;
      o->imp.pool = (tbe_pool)(bad ? 0 : k);
      break;
    case OPT_OUT:
      bad = (k = pick(optarg, dtypes, 3)) < 0;
      o->imp.out = (tbe_dtype)(bad ? 0 : k);
      break;
    case OPT_BOUNDS:
      bad = (k = pick(optarg, modes, 4)) < 0;
      o->imp.bounds = (tbe_bounds_mode)(bad ? 0 : k);
      break;
    }
    if (bad) {
      say_error("bad value '%s' for --%s", optarg, all_options[which].name);
      return usage_error(usage);
    }
  }
  tbe_status s = eng_parse_list(engines, &o->eng.engines);
  if (s.code != TBE_OK)
    return fail_with(s);
  return -1;
}

/* ---- engines, the fault and the memory check: shared by run, import, replay, export ---- */

/* Opens the engines and prints what cannot run here, once. A fault (--inject-fault) aimed at an
 * engine that does not run is bad usage: it would land nowhere. Returns -1 or an exit code;
 * *x must be closed either way. */
static int open_engines(const cli_options *o, eng_ctx **x)
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

/* Where the fault of a run landed, over its cases. */
typedef struct {
  int landed;
  int64_t most; /* the longest that output was in a case (0 or less: never produced) */
} fault_seen;

static void fault_note(fault_seen *f, const eng_case_result *r)
{
  f->landed |= r->fault_landed;
  if (r->fault_elements > f->most)
    f->most = r->fault_elements;
}

/* Exit 2 when o asked for a fault and it landed in no case (it would have tested nothing). */
static int fault_check(const cli_options *o, const fault_seen *f)
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
static int check_memory(const tbe_case *c, const char *canon, const cli_options *o)
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

typedef struct {
  const cli_options *o;
  db *d;
  eng_ctx *x;
  int64_t run;
  int live;        /* stdout is a terminal: one progress line, redrawn */
  progress prog;
  int64_t failed;  /* case runs with a failure or an error */
  fault_seen fault;
} session;

static int session_open(session *s, const cli_options *o, int argc, char **argv, int64_t total)
{
  memset(s, 0, sizeof *s);
  s->o = o;
  s->fault.most = -1;
  int rc = open_engines(o, &s->x);
  if (rc >= 0)
    return rc;
  tbe_status st = db_open(o->db_path, DB_WRITE, &s->d);
  if (st.code != TBE_OK)
    return fail_with(st);
  runinfo ri;
  runinfo_collect(&ri);
  char engines[64], shard[48];
  eng_format_list(o->eng.engines, engines, sizeof engines);
  snprintf(shard, sizeof shard, "%lld/%lld", o->shard_i, o->shard_n);
  char *args = quote_argv(argc, argv);
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
    .argv = args ? args : "?",
    .engines = engines,
    .shard = o->shard_n ? shard : NULL,
    .repeats = o->repeat,
    .injected = o->eng.fault_output[0] != '\0',
    .campaign = o->campaign ? o->campaign : o->campaign_cases ? campaign : NULL,
  };
  st = db_run_begin(s->d, &info, &s->run);
  free(args);
  if (st.code != TBE_OK)
    return fail_with(st);
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

/* Stores one case's result and reports it: a line per case (plain) or the progress line (live),
 * and the reasons of its failures. Returns -1 to go on, or an exit code. */
static int session_case(session *s, const char *canon, int repeat, const eng_case_result *r)
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
  progress_step(&s->prog, failed);
  s->failed += failed;
  fault_note(&s->fault, r);
  if (s->live && !failed) {
    session_redraw(s);
    return -1;
  }
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
  if (s->live)
    session_redraw(s);
  fflush(stdout);
  return -1;
}

/* Ends the run of `cases` cases, each `repeats` times: marks it complete, prints the summary
 * and a warning for what did not run. Returns the exit code. */
static int session_close(session *s, int64_t cases, int repeats)
{
  if (s->live)
    printf("\r\033[K");
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
  int rc = fault_check(s->o, &s->fault);
  return rc >= 0 ? rc : s->failed ? EXIT_FAILURES : EXIT_PASS;
}

static void session_free(session *s)
{
  eng_close(s->x);
  db_close(s->d);
}

/* ---- run ---- */

typedef struct {
  tbe_case *c;
  char *canon;
} parsed_case;

/* Parses one case text, naming `where` in errors; appends it to *v. Returns -1 or exit code. */
static int add_case(const char *text, const char *where, parsed_case **v, int64_t *n)
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
static int collect_cases(int argc, char **argv, parsed_case **v, int64_t *n)
{
  for (int a = 0; a < argc; a++) {
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
      snprintf(where, sizeof where, "%s:%d", argv[a], cl.lines[i].line);
      rc = add_case(cl.lines[i].text, where, v, n);
    }
    case_list_free(&cl);
    if (rc >= 0)
      return rc;
  }
  return -1;
}

static void free_cases(parsed_case *v, int64_t n)
{
  for (int64_t i = 0; i < n; i++) {
    case_free(v[i].c);
    free(v[i].canon);
  }
  free(v);
}

static int cmd_run(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB,   OPT_ENGINES, OPT_REPEAT, OPT_SHARD,   OPT_MAXV,
                                OPT_FAULT, OPT_MAXMEM, OPT_CAMPAIGN, 0};
  cli_options o;
  int rc = parse_options(argc, argv, run_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (optind >= argc) {
    say_error("give at least one case file or case");
    return usage_error(run_usage);
  }
  parsed_case *all = NULL;
  int64_t n = 0;
  rc = collect_cases(argc - optind, argv + optind, &all, &n);
  if (rc >= 0) {
    free_cases(all, n);
    return rc;
  }
  if (o.shard_n && !o.campaign) {
    char head[96];
    int len = snprintf(head, sizeof head, "%lld %d %u", o.shard_n, o.repeat,
                       (unsigned)o.eng.engines);
    uint64_t h = eng_fnv1a(ENG_FNV_SEED, head, (size_t)len);
    for (int64_t i = 0; i < n; i++)
      h = eng_fnv1a(h, all[i].canon, strlen(all[i].canon) + 1);
    o.campaign_cases = h | 1; /* never 0: 0 means none */
  }
  int64_t mine = 0; /* this shard's cases, moved to the front */
  for (int64_t i = 0; i < n; i++) {
    parsed_case p = all[i];
    if (!o.shard_n || i % o.shard_n == o.shard_i - 1) {
      all[i] = all[mine];
      all[mine++] = p;
    }
  }
  for (int64_t i = 0; rc < 0 && i < mine; i++)
    rc = check_memory(all[i].c, all[i].canon, &o);
  session s = {0};
  if (rc < 0)
    rc = session_open(&s, &o, argc, argv, mine * o.repeat);
  for (int64_t i = 0; rc < 0 && i < mine; i++)
    for (int k = 0; rc < 0 && k < o.repeat; k++) {
      eng_case_result r;
      tbe_status st = eng_run_case(s.x, all[i].c, all[i].canon, &r);
      rc = st.code == TBE_OK ? session_case(&s, all[i].canon, k, &r) : fail_with(st);
      eng_case_result_free(&r);
    }
  if (rc < 0)
    rc = session_close(&s, mine, o.repeat);
  session_free(&s);
  free_cases(all, n);
  return rc;
}

/* ---- import ---- */

static int cmd_import(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB, OPT_ENGINES, OPT_MAXV, OPT_FAULT, OPT_POOL, OPT_OUT,
                                OPT_BOUNDS, 0};
  cli_options o;
  int rc = parse_options(argc, argv, import_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (argc - optind != 1)
    return usage_error(import_usage);
  tbe_batch b;
  char canon[160];
  tbe_status st = import_dir(argv[optind], &o.imp, &b, canon, sizeof canon);
  if (st.code != TBE_OK)
    return fail_with(st);
  session s;
  rc = session_open(&s, &o, argc, argv, 1);
  if (rc < 0) {
    eng_case_result r;
    gpu_fwd_config cfg = {0};
    st = eng_run_batch(s.x, &b, canon, o.imp.bounds, &cfg, NULL, &r);
    rc = st.code == TBE_OK ? session_case(&s, canon, 0, &r) : fail_with(st);
    eng_case_result_free(&r);
  }
  if (rc < 0)
    rc = session_close(&s, 1, 1);
  session_free(&s);
  tbe_batch_free(&b);
  return rc;
}

/* ---- replay ---- */

static void print_check(const eng_check *c)
{
  char pair[32];
  snprintf(pair, sizeof pair, "%s:%s", eng_name(c->engine), c->baseline);
  printf("%-11s %-13s %-9s %-11s %-4s", pair, c->path, c->output, cmp_metric_name(c->metric),
         eng_status_name(c->status));
  if (c->compared) {
    const cmp_result *m = &c->cmp;
    printf("  elements %lld, bit-exact %lld, violations %lld", (long long)m->elements,
           (long long)m->exact, (long long)m->violations);
    if (m->metric == CMP_BOUND)
      printf(", worst ratio %.3e", m->worst_bound_ratio);
    else
      printf(", max ulp %lld", (long long)m->max_ulp);
    printf(", max abs %.3g, max rel %.3g", m->max_abs, m->max_rel);
  }
  putchar('\n');
  if (c->status != ENG_PASS)
    printf("    %s\n", c->reason);
  for (int i = 0; i < c->n_violations; i++) {
    const eng_violation *v = &c->violations[i];
    printf("    %-34s expected %-24.17g got %-16.9g", v->coordinates, v->v.expected, v->v.got);
    if (c->metric == CMP_BOUND)
      printf(" bound %.3g", v->v.bound);
    putchar('\n');
  }
}

static int cmd_replay(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB, OPT_ENGINES, OPT_MAXV, OPT_FAULT, OPT_MAXMEM, 0};
  cli_options o;
  int rc = parse_options(argc, argv, replay_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (argc - optind != 1)
    return usage_error(replay_usage);
  const char *arg = argv[optind];
  char *text = NULL;
  if (!is_case_text(arg)) {
    db *d;
    tbe_status st = db_open(o.db_path, DB_READ, &d);
    if (st.code == TBE_OK) {
      st = db_case_text(d, arg, &text);
      db_close(d);
    }
    if (st.code != TBE_OK)
      return fail_with(st);
    if (!strncmp(text, "import ", 7)) {
      say_error("case %s is an imported batch (%s): rerun it with tbecheck import DIR", arg,
                text);
      free(text);
      return EXIT_USAGE;
    }
  }
  parsed_case *pc = NULL;
  int64_t n = 0;
  rc = add_case(text ? text : arg, "case", &pc, &n);
  free(text);
  if (rc >= 0)
    return rc;
  eng_ctx *x = NULL;
  rc = check_memory(pc[0].c, pc[0].canon, &o);
  if (rc < 0)
    rc = open_engines(&o, &x);
  eng_case_result r;
  tbe_status st = tbe_ok();
  if (rc < 0) {
    char hash[17];
    db_case_hash(pc[0].canon, hash);
    printf("case %s  %s\n\n", hash, pc[0].canon);
    st = eng_run_case(x, pc[0].c, pc[0].canon, &r);
    rc = st.code == TBE_OK ? -1 : fail_with(st);
  }
  if (rc < 0) {
    for (int i = 0; i < r.n_checks; i++)
      print_check(&r.checks[i]);
    fault_seen f = {0, -1};
    fault_note(&f, &r);
    rc = fault_check(&o, &f);
    if (rc < 0)
      rc = eng_case_failed(&r) ? EXIT_FAILURES : EXIT_PASS;
    eng_case_result_free(&r);
  }
  eng_close(x);
  free_cases(pc, n);
  return rc;
}

/* ---- list, show, report: reading the database ---- */

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

static int cmd_list(int argc, char **argv)
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

static int cmd_show(int argc, char **argv)
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

static int cmd_report(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB, OPT_RUN, OPT_SINCE, OPT_HTML, 0};
  cli_options o;
  int rc = parse_options(argc, argv, report_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (optind != argc)
    return usage_error(report_usage);
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
      const db_table *c = &t[CAMPAIGN]; /* run, campaign, shard, ..., complete (15) */
      printf("\ncampaign %s: %d runs (shards merged)\n", c->cells[1], c->nrows);
      for (int r = 0; r < c->nrows; r++) {
        char **row = c->cells + r * c->ncols;
        printf("  run %-5s shard %-6s %s on %s, %s, started %s, %s\n", row[0],
               row[2] ? row[2] : "-", row[3] ? row[3] : "no commit", row[5],
               row[7] ? row[7] : "no GPU", row[13], !strcmp(row[15], "1") ? "complete"
                                                                           : "incomplete");
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

/* ---- merge, export, random ---- */

static int cmd_merge(int argc, char **argv)
{
  static const int allowed[] = {0};
  cli_options o;
  int rc = parse_options(argc, argv, merge_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (argc - optind < 2)
    return usage_error(merge_usage);
  db *d;
  tbe_status st = db_open(argv[optind], DB_WRITE, &d);
  for (int a = optind + 1; st.code == TBE_OK && a < argc; a++) {
    int added, open_runs;
    st = db_merge(d, argv[a], &added, &open_runs);
    if (st.code == TBE_OK && open_runs)
      printf("%s: %d run%s added, %d incomplete (stopped before its end: its stored cases are "
             "kept, the rest never ran)\n",
             argv[a], added, added == 1 ? "" : "s", open_runs);
    else if (st.code == TBE_OK)
      printf("%s: %d run%s added\n", argv[a], added, added == 1 ? "" : "s");
  }
  db_close(d);
  return st.code == TBE_OK ? EXIT_PASS : fail_with(st);
}

/* 1 if name is what an export writes into a directory: *.npy or manifest.json. */
static int export_file_name(const char *name)
{
  size_t n = strlen(name);
  return !strcmp(name, "manifest.json") || (n > 4 && !strcmp(name + n - 4, ".npy"));
}

/* Removes the export files in dir (all of them, only if every entry is one; a subdirectory
 * counts when `nested` and it is named NNNN and holds only export files itself), or with
 * dry_run only checks. Returns -1, or an exit code after naming what is in the way. */
static int clear_export(const char *dir, int nested, int dry_run)
{
  DIR *d = opendir(dir);
  if (!d) {
    say_error("cannot read directory %s: %s", dir, strerror(errno));
    return EXIT_USAGE;
  }
  int rc = -1;
  struct dirent *e;
  while (rc < 0 && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    int is_dir = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
    int numbered = strlen(e->d_name) == 4 && strspn(e->d_name, "0123456789") == 4;
    if (is_dir && nested && numbered)
      rc = clear_export(path, 0, dry_run);
    else if (is_dir || !S_ISREG(st.st_mode) || !export_file_name(e->d_name)) {
      say_error("%s is not from an earlier export; --force replaces only an export's files "
                "(*.npy, manifest.json, NNNN/): choose another directory", path);
      rc = EXIT_USAGE;
    }
    if (rc < 0 && !dry_run && (is_dir ? rmdir(path) : unlink(path)) != 0) {
      say_error("cannot remove %s: %s", path, strerror(errno));
      rc = EXIT_INTERNAL;
    }
  }
  closedir(d);
  return rc;
}

/* An export writes only into a new or empty directory, or with --force over an earlier export
 * (which it removes first, so no file of it is left beside the new one). */
static int prepare_export_dir(const char *dir, int force)
{
  struct stat st;
  if (stat(dir, &st) != 0)
    return -1; /* export creates it */
  if (!S_ISDIR(st.st_mode)) {
    say_error("%s exists and is not a directory", dir);
    return EXIT_USAGE;
  }
  DIR *d = opendir(dir);
  struct dirent *e;
  int empty = 1;
  while (d && empty && (e = readdir(d)))
    empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
  if (d)
    closedir(d);
  if (empty)
    return -1;
  if (!force) {
    say_error("%s is not empty: export writes into a new or empty directory (--force replaces "
              "an earlier export there)", dir);
    return EXIT_USAGE;
  }
  int rc = clear_export(dir, 1, 1);
  return rc >= 0 ? rc : clear_export(dir, 1, 0);
}

static int cmd_export(int argc, char **argv)
{
  static const int allowed[] = {OPT_FORCE, OPT_MAXMEM, 0};
  cli_options o;
  int rc = parse_options(argc, argv, export_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (argc - optind != 2)
    return usage_error(export_usage);
  char *what = argv[optind], *dir = argv[optind + 1];
  parsed_case *all = NULL;
  int64_t n = 0;
  rc = collect_cases(1, &what, &all, &n);
  o.eng.engines = 1u << ENG_REF;
  for (int64_t i = 0; rc < 0 && i < n; i++) /* every case must generate before one is written */
    rc = check_memory(all[i].c, all[i].canon, &o);
  for (int64_t i = 0; rc < 0 && i < n; i++) {
    tbe_batch b;
    gen_bwd bwd;
    tbe_status st = gen_case(all[i].c, &b, &bwd);
    if (st.code == TBE_OK)
      gen_case_free(&b, &bwd);
    else {
      say_error("case '%.200s' cannot be generated: %s", all[i].canon, st.message);
      rc = st.code == TBE_EINVAL ? EXIT_USAGE : EXIT_INTERNAL;
    }
  }
  if (rc < 0)
    rc = prepare_export_dir(dir, o.force);
  int count = 1;
  if (rc < 0) {
    tbe_status st = is_case_text(what) ? export_case(what, dir) : export_file(what, dir, &count);
    rc = st.code == TBE_OK ? EXIT_PASS : fail_with(st);
  }
  free_cases(all, n);
  if (rc == EXIT_PASS)
    fprintf(stderr, "exported %d case(s) to %s\n", count, dir);
  return rc;
}

static int cmd_random(int argc, char **argv)
{
  static const int allowed[] = {OPT_PATH, 0};
  cli_options o;
  int rc = parse_options(argc, argv, random_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  long long v[2];
  if (argc - optind != 2)
    return usage_error(random_usage);
  for (int i = 0; i < 2; i++)
    if (parse_int(argv[optind + i], 0, INT64_MAX, &v[i])) {
      say_error("bad %s '%s': expected an integer 0 .. 2^63-1", i ? "SEED" : "N",
                argv[optind + i]);
      return usage_error(random_usage);
    }
  long long n = v[0], seed = v[1];
  char buf[4096];
  for (long long i = 0; i < n; i++) {
    (o.small_path ? case_random_small : case_random)((uint64_t)seed, (uint64_t)i, buf,
                                                     sizeof buf);
    puts(buf);
  }
  return EXIT_PASS;
}

/* tbecheck --version: the version, the commit of the source tree it was built from (read now,
 * as a run records it), the build type, and whether CUDA was built in. */
static int print_version(void)
{
  runinfo ri;
  runinfo_collect(&ri);
  printf("tbecheck %s\n", TBE_VERSION);
  if (ri.git_commit[0])
    printf("commit   %s%s\n", ri.git_commit, ri.dirty == 1 ? " (dirty tree)" : "");
  else
    printf("commit   unknown (%s is not a git checkout)\n", TBE_SOURCE_DIR);
  printf("build    %s\n", TBE_BUILD_TYPE[0] ? TBE_BUILD_TYPE : "(no CMAKE_BUILD_TYPE)");
  if (TBE_CUDA_VERSION[0])
    printf("CUDA     on (toolkit %s)\n", TBE_CUDA_VERSION);
  else
    printf("CUDA     off (built without a CUDA compiler: the gpu engine skips)\n");
#if defined(TBE_FAULT_NAME)
  printf("fault    %s (planted on purpose: this build is wrong, fuzz/FAULTS.md)\n", TBE_FAULT_NAME);
#endif
  return EXIT_PASS;
}

static int race_cmd(int argc, char **argv)
{
  return race_command(argc, argv, TBE_VERSION, TBE_CUDA_VERSION[0] ? TBE_CUDA_VERSION : NULL);
}

int main(int argc, char **argv)
{
  signal(SIGPIPE, SIG_IGN); /* a dead oracle worker is an error, not our end */
  signal(SIGXFSZ, SIG_IGN); /* a file size limit is a write error (EFBIG), reported */
  static const struct {
    const char *name;
    int (*fn)(int, char **);
  } commands[] = { /* one line per command */
    {"run", cmd_run},
    {"replay", cmd_replay},
    {"list", cmd_list},
    {"show", cmd_show},
    {"report", cmd_report},
    {"import", cmd_import},
    {"export", cmd_export},
    {"merge", cmd_merge},
    {"random", cmd_random},
    {"fuzz", fuzz_command},
    {"race", race_cmd},
  };
  if (argc < 2)
    return usage_error(usage_text);
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    fputs(usage_text, stdout);
    return EXIT_PASS;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version"))
    return print_version();
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(cmd, commands[i].name)) {
      command_name = cmd;
      return commands[i].fn(argc - 1, argv + 1);
    }
  fprintf(stderr, "tbecheck: unknown command '%s'\n\n", cmd);
  return usage_error(usage_text);
}
