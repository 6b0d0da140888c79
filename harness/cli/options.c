/* options.c: the options every tbecheck command parses, error printing and the table printers
 * the commands share. Not a command (cmd_*.c, main.c).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "options.h"
#include "shard.h"

/* ---- small helpers ---- */

const char *command_name = "tbecheck";

void say_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void say_error(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tbecheck %s: ", command_name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* Prints a failed status and returns its exit code: bad input 2, anything else 3. */
int fail_with(tbe_status s)
{
  say_error("%s", s.message);
  return s.code == TBE_EINVAL ? EXIT_USAGE : EXIT_INTERNAL;
}

int usage_error(const char *usage)
{
  fputs(usage, stderr);
  return EXIT_USAGE;
}

/* Parses a decimal integer in [lo, hi] (no sign, no blanks, nothing past the range of long
 * long); 0 on success. */
int parse_int(const char *s, long long lo, long long hi, long long *v)
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
int parse_size(const char *s, long long *v)
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
const char *human_bytes(int64_t n, char buf[32])
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

int is_case_text(const char *arg) { return strchr(arg, '=') != NULL; }

/* An existing path is tried as it will be used (a file opened for writing, untruncated; a
 * directory asked for write and search); a new one is made and removed at once, which is the
 * only test that holds for every file system (root passes access() where /proc refuses). */
int check_output_path(const char *path, int is_dir, const char *what)
{
  struct stat st;
  int err = 0;
  if (!*path) {
    say_error("the %s path is empty", what);
    return EXIT_USAGE;
  }
  if (stat(path, &st) == 0) {
    if (!is_dir && S_ISDIR(st.st_mode)) {
      say_error("cannot write the %s %s: it is a directory", what, path);
      return EXIT_USAGE;
    }
    int fd = is_dir ? -1 : open(path, O_WRONLY);
    if (is_dir ? access(path, W_OK | X_OK) != 0 : fd < 0)
      err = errno;
    if (fd >= 0)
      close(fd);
  } else if (errno != ENOENT) {
    err = errno;
  } else if (is_dir) { /* made with its parents: try the first missing one */
    char first[4096];
    snprintf(first, sizeof first, "%s", path);
    for (char *cut; (cut = strrchr(first, '/')) && cut != first;) {
      *cut = '\0';
      if (stat(first, &st) == 0) {
        *cut = '/';
        break;
      }
    }
    if (mkdir(first, 0755) != 0 || rmdir(first) != 0)
      err = errno;
  } else {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || unlink(path) != 0)
      err = errno;
    if (fd >= 0)
      close(fd);
  }
  if (!err)
    return -1;
  say_error("cannot write the %s %s: %s (nothing was done)", what, path, strerror(err));
  return EXIT_USAGE;
}

/* The command line, shell-quoted, into a malloc'd string. */
char *quote_argv(int argc, char **argv)
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
void print_table(const db_table *t, int max_width)
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
void print_record(const db_table *t)
{
  for (int c = 0; t->nrows > 0 && c < t->ncols; c++)
    printf("%-18s %s\n", t->names[c], t->cells[c] ? t->cells[c] : "-");
}

/* ---- options shared by the commands that run engines ---- */



static const struct option all_options[] = {
  {"db", required_argument, 0, OPT_DB},
  {"engines", required_argument, 0, OPT_ENGINES},
  {"repeat", required_argument, 0, OPT_REPEAT},
  {"shard", required_argument, 0, OPT_SHARD},
  {"max-violations", required_argument, 0, OPT_MAXV},
  {"engine-timeout", required_argument, 0, OPT_TIMEOUT},
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
  {"result", required_argument, 0, OPT_RESULT},
  {"gpus", required_argument, 0, OPT_GPUS},
  {"gpu-ids", required_argument, 0, OPT_GPU_IDS},
  {"help", no_argument, 0, OPT_HELP},
  {0, 0, 0, 0},
};

int bad_option_value(int opt, const char *s)
{
  long long v;
  switch (opt) {
  case OPT_CAMPAIGN:
    return !*s || strlen(s) > 64 ||
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") !=
               strlen(s);
  case OPT_GPUS: /* gpus.c checks N against the host */
    return strcmp(s, "all") && parse_int(s, 1, 4096, &v);
  case OPT_GPU_IDS:
    return !*s || strspn(s, "0123456789,") != strlen(s);
  default:
    return 1;
  }
}

/* Finds a name in a table of names indexed by enum value; -1 if absent. */
int pick(const char *s, const char *const *names, int count)
{
  for (int i = 0; i < count; i++)
    if (!strcmp(s, names[i]))
      return i;
  return -1;
}

/* Parses the options of a command that accepts those in `allowed` (a string of OPT_* values).
 * Returns -1 to go on (positional arguments from optind), or an exit code. */
int parse_options(int argc, char **argv, const char *usage, const int *allowed,
                         cli_options *o)
{
  memset(o, 0, sizeof *o);
  o->db_path = DEFAULT_DB;
  o->repeat = 1;
  o->run = -1;
  o->eng.max_violations = DEFAULT_MAX_VIOLATIONS;
  o->eng.worker_timeout_s = DEFAULT_ENGINE_TIMEOUT;
  o->imp = (import_options){TBE_POOL_SUM, TBE_FP32, TBE_BOUNDS_WARNING};
  const char *engines = ENG_DEFAULT_LIST;
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
    case OPT_TIMEOUT:
      bad = parse_int(optarg, 0, 604800, &v);
      o->eng.worker_timeout_s = (int)v;
      break;
    case OPT_FAULT: {
      tbe_status s = eng_parse_fault(optarg, &o->eng);
      if (s.code != TBE_OK)
        return fail_with(s);
      break;
    }
    case OPT_RUN: bad = parse_int(optarg, 1, INT64_MAX, &o->run); break;
    case OPT_RESULT: bad = parse_int(optarg, 1, INT64_MAX, &o->result); break;
    case OPT_FAILED: o->failed_only = 1; break;
    case OPT_FORCE: o->force = 1; break;
    case OPT_MAXMEM: bad = parse_size(optarg, &o->max_memory); break;
    case OPT_CAMPAIGN:
      o->campaign = optarg;
      bad = bad_option_value(ch, optarg);
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
    case OPT_GPUS:
      o->gpus = optarg;
      bad = bad_option_value(ch, optarg);
      break;
    case OPT_GPU_IDS:
      o->gpu_ids = optarg;
      bad = bad_option_value(ch, optarg);
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

