/* tbecheck.c: the command line: `run` named cases through the reference and check it against
 * the exact sum, `export` cases for the NumPy oracle, `random` cases for sweeps.
 * Not library code: this is the one place that prints and chooses exit codes.
 *
 * Exit codes: 0 all passed, 1 failures found, 2 bad usage or bad input, 3 I/O or internal error.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bounds.h"
#include "case.h"
#include "compare.h"
#include "export.h"
#include "forward.h"

enum { EXIT_PASS = 0, EXIT_FAILURES = 1, EXIT_USAGE = 2, EXIT_INTERNAL = 3 };

static const char usage_text[] =
    "usage: tbecheck <command> [options] [arguments]\n"
    "\n"
    "commands:\n"
    "  run [CASEFILE|CASE ...]   run cases through the reference engine and check every output\n"
    "                            element against the exact sum within its derived bound\n"
    "  export CASE|CASEFILE DIR  write a case's inputs and the reference's outputs as .npy\n"
    "                            files (+ manifest.json) for the NumPy oracle; a case file is\n"
    "                            exported one case per DIR/NNNN\n"
    "  random N SEED             print N random valid cases (the oracle's sweep)\n"
    "  help                      this text\n"
    "\n"
    "A CASE is one line of key=value tokens (see README.md), quoted as one argument; any\n"
    "argument without '=' is a case file (one case per line, '#' comments).\n"
    "\n"
    "exit codes: 0 all passed, 1 failures found, 2 bad usage or bad input,\n"
    "            3 I/O or internal error\n";

static int exit_for(tbe_code c)
{
  return c == TBE_EINVAL ? EXIT_USAGE : EXIT_INTERNAL;
}

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The outcome of one case on the reference engine. */
typedef struct {
  enum { CASE_PASS, CASE_FAIL, CASE_STOPPED } verdict; /* STOPPED: FATAL bounds check fired */
  double worst_ratio;
  int64_t violations, elements, warnings;
  double ms;
  char note[320];
} case_outcome;

/* Generates the case, runs bounds check + forward + exact forward, compares by bound_ratio. */
static tbe_status run_case(const tbe_case *c, case_outcome *o)
{
  memset(o, 0, sizeof *o);
  tbe_batch b;
  tbe_status st = case_generate(c, &b);
  if (st.code != TBE_OK)
    return st;
  tbe_layout l;
  st = tbe_layout_init(&l, &b);
  if (st.code != TBE_OK) {
    tbe_batch_free(&b);
    return st;
  }
  void *out = NULL;
  double *exact = NULL, *bound = NULL;
  double t0 = now_ms();
  st = ref_bounds_check(&b, &l, case_bounds(c), &o->warnings);
  if (st.code == TBE_EBOUNDS) {
    o->verdict = CASE_STOPPED;
    snprintf(o->note, sizeof o->note, "fatal: %s", st.message);
    st = tbe_ok();
    goto done;
  }
  if (st.code != TBE_OK)
    goto done;
  size_t n = (size_t)l.out_elems;
  out = malloc(tbe_dtype_size(b.out_dtype) * n + 1);
  exact = malloc(sizeof(double) * n + 1);
  bound = malloc(sizeof(double) * n + 1);
  if (!out || !exact || !bound) {
    st = tbe_error(TBE_ENOMEM, "output", -1, "cannot allocate %zu output elements", n);
    goto done;
  }
  st = ref_forward(&b, &l, out);
  o->ms = now_ms() - t0;
  if (st.code == TBE_OK)
    st = ref_forward_exact(&b, &l, exact, bound);
  if (st.code != TBE_OK)
    goto done;
  cmp_result r;
  st = cmp_init(&r, CMP_BOUND, 1);
  if (st.code != TBE_OK)
    goto done;
  cmp_bound(&r, b.out_dtype, exact, bound, out, l.out_elems);
  o->worst_ratio = r.worst_bound_ratio;
  o->violations = r.violations;
  o->elements = r.elements;
  o->verdict = r.violations ? CASE_FAIL : CASE_PASS;
  if (r.violations)
    snprintf(o->note, sizeof o->note, "first violation: element %" PRId64
             " got %.17g, exact %.17g, bound %.3g",
             r.first[0].index, r.first[0].got, r.first[0].expected, r.first[0].bound);
  cmp_free(&r);
done:
  free(out);
  free(exact);
  free(bound);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  return st;
}

typedef struct {
  int cases, pass, fail, stopped;
  double worst_ratio;
} run_totals;

/* Runs one case text; prints its line. Returns an exit code for errors, or -1 to go on. */
static int run_text(const char *text, const char *where, run_totals *tot)
{
  tbe_case *c;
  tbe_status st = case_parse(text, &c);
  if (st.code != TBE_OK) {
    fprintf(stderr, "tbecheck: %s: bad case (key '%s'): %s\n", where, st.field, st.message);
    return EXIT_USAGE;
  }
  char canon[4096];
  case_format(c, canon, sizeof canon);
  case_outcome o;
  st = run_case(c, &o);
  case_free(c);
  if (st.code != TBE_OK) {
    fprintf(stderr, "tbecheck: %s: %s: %s [%s]\n", where, tbe_code_name(st.code), st.message,
            canon);
    return exit_for(st.code);
  }
  static const char *verdict[] = {"pass", "FAIL", "pass"};
  tot->cases++;
  tot->pass += o.verdict != CASE_FAIL;
  tot->fail += o.verdict == CASE_FAIL;
  tot->stopped += o.verdict == CASE_STOPPED;
  if (o.worst_ratio > tot->worst_ratio)
    tot->worst_ratio = o.worst_ratio;
  if (o.verdict == CASE_STOPPED)
    printf("%-4s  %-40.40s  %s\n", verdict[o.verdict], o.note, canon);
  else
    printf("%-4s  bound_ratio %.3e  warnings %-6" PRId64 " %8.2f ms  %s\n", verdict[o.verdict],
           o.worst_ratio, o.warnings, o.ms, canon);
  if (o.verdict == CASE_FAIL)
    printf("      %" PRId64 " of %" PRId64 " elements outside the bound; %s\n", o.violations,
           o.elements, o.note);
  fflush(stdout);
  return -1;
}

static int is_file(const char *arg) { return strchr(arg, '=') == NULL; }

static int cmd_run(int argc, char **argv)
{
  static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (ch == 'h') {
      fputs("usage: tbecheck run [CASEFILE|CASE ...]\n"
            "Runs each case through the reference (bounds check, forward) and checks every\n"
            "output element against the exact sum within its derived bound (metric\n"
            "bound_ratio). A case whose FATAL bounds check fires passes if the reference\n"
            "names the offender. Exit 0 all passed, 1 failures, 2 bad input, 3 I/O error.\n",
            stdout);
      return EXIT_PASS;
    }
    return EXIT_USAGE;
  }
  if (optind >= argc) {
    fputs("tbecheck run: give at least one case file or case\n", stderr);
    return EXIT_USAGE;
  }
  run_totals tot = {0, 0, 0, 0, 0};
  double t0 = now_ms();
  for (int a = optind; a < argc; a++) {
    if (!is_file(argv[a])) {
      int rc = run_text(argv[a], "argument", &tot);
      if (rc >= 0)
        return rc;
      continue;
    }
    case_list cl;
    tbe_status st = case_file_read(argv[a], &cl);
    if (st.code != TBE_OK) {
      fprintf(stderr, "tbecheck: %s\n", st.message);
      return st.code == TBE_EIO ? EXIT_USAGE : exit_for(st.code);
    }
    for (int i = 0; i < cl.count; i++) {
      char where[512];
      snprintf(where, sizeof where, "%s:%d", argv[a], cl.lines[i].line);
      int rc = run_text(cl.lines[i].text, where, &tot);
      if (rc >= 0) {
        case_list_free(&cl);
        return rc;
      }
    }
    case_list_free(&cl);
  }
  printf("\nreference vs exact: %d cases, %d pass (%d stopped by a FATAL bounds check), "
         "%d fail; worst bound_ratio %.3e; %.1f s\n",
         tot.cases, tot.pass, tot.stopped, tot.fail, tot.worst_ratio, (now_ms() - t0) / 1e3);
  return tot.fail ? EXIT_FAILURES : EXIT_PASS;
}

static int cmd_export(int argc, char **argv)
{
  if (argc != 3 || strcmp(argv[1], "--help") == 0) {
    fputs("usage: tbecheck export CASE|CASEFILE DIR\n", argc == 2 ? stdout : stderr);
    return argc == 2 ? EXIT_PASS : EXIT_USAGE;
  }
  tbe_status st;
  int count = 1;
  if (is_file(argv[1]))
    st = export_file(argv[1], argv[2], &count);
  else
    st = export_case(argv[1], argv[2]);
  if (st.code != TBE_OK) {
    fprintf(stderr, "tbecheck export: %s\n", st.message);
    return exit_for(st.code);
  }
  fprintf(stderr, "exported %d case(s) to %s\n", count, argv[2]);
  return EXIT_PASS;
}

/* Parses a non-negative decimal integer argument; returns 0 on success. */
static int parse_u64(const char *s, uint64_t *v)
{
  char *end;
  if (!*s || *s == '-')
    return -1;
  unsigned long long x = strtoull(s, &end, 10);
  if (*end)
    return -1;
  *v = x;
  return 0;
}

static int cmd_random(int argc, char **argv)
{
  uint64_t n, seed;
  if (argc != 3 || parse_u64(argv[1], &n) || parse_u64(argv[2], &seed)) {
    fputs("usage: tbecheck random N SEED   (non-negative integers)\n", stderr);
    return EXIT_USAGE;
  }
  char buf[4096];
  for (uint64_t i = 0; i < n; i++) {
    case_random(seed, i, buf, sizeof buf);
    puts(buf);
  }
  return EXIT_PASS;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    fputs(usage_text, stdout);
    return EXIT_PASS;
  }
  if (!strcmp(cmd, "run"))
    return cmd_run(argc - 1, argv + 1);
  if (!strcmp(cmd, "export"))
    return cmd_export(argc - 1, argv + 1);
  if (!strcmp(cmd, "random"))
    return cmd_random(argc - 1, argv + 1);
  fprintf(stderr, "tbecheck: unknown command '%s'\n\n%s", cmd, usage_text);
  return EXIT_USAGE;
}
