/* options.h: what every tbecheck command shares: exit codes, the options it parses, error
 * printing and tables. Not a library: only the tbecheck program includes it, and only it prints
 * and chooses exit codes. The run session is session.h's.
 *
 * Exit codes, one rule for every command: 0 all passed, 1 failures found, 2 bad usage or bad
 * input (what the command was given is wrong, missing or not what it must be: options, cases,
 * case files, .npy files, a database or a run or result that does not exist, a fault that
 * lands nowhere, a case too big for this machine), 3 I/O or internal error while it worked
 * (a write that failed, a full disk, out of memory). A command ends on the first exit code
 * above 1; bad input is found before anything is written wherever it can be.
 */
#ifndef HARNESS_OPTIONS_H
#define HARNESS_OPTIONS_H

#include <stdint.h>

#include "db.h"
#include "engine.h"
#include "import.h"

enum { EXIT_PASS = 0, EXIT_FAILURES = 1, EXIT_USAGE = 2, EXIT_INTERNAL = 3 };

#define DEFAULT_DB "tbecheck.db"
#define DEFAULT_MAX_VIOLATIONS 10
#define DEFAULT_ENGINE_TIMEOUT 1800 /* s: a worker engine's reply to one case, GPU-sized ones too */

/* The command running ("run", "report", ...), which error messages name. */
extern const char *command_name;

typedef struct {
  const char *db_path;
  eng_options eng;
  int repeat;
  long long shard_i, shard_n; /* 0/0: no sharding */
  long long run;              /* --run, or -1 */
  long long result;           /* replay --result, or 0 */
  int failed_only;
  import_options imp;
  int force;                  /* export --force */
  long long max_memory;       /* --max-memory, or 0: what the machine has available */
  const char *campaign;       /* run --campaign, or NULL */
  uint64_t campaign_cases;    /* run --shard without --campaign: FNV-1a of the whole case list */
  const char *since;          /* report --since, or NULL */
  const char *html;           /* report --html, or NULL */
  int small_path;             /* random --path small */
  const char *gpus;           /* run --gpus all|N, or NULL */
  const char *gpu_ids;        /* run --gpu-ids 0,2,..., or NULL */
} cli_options;

enum {
  OPT_DB = 1000, OPT_ENGINES, OPT_REPEAT, OPT_SHARD, OPT_MAXV, OPT_FAULT, OPT_RUN, OPT_FAILED,
  OPT_POOL, OPT_OUT, OPT_BOUNDS, OPT_FORCE, OPT_MAXMEM, OPT_CAMPAIGN, OPT_SINCE, OPT_HTML,
  OPT_PATH, OPT_RESULT, OPT_GPUS, OPT_GPU_IDS, OPT_TIMEOUT, OPT_HELP
};

/* Parses the options of a command that accepts those in `allowed` (a 0-terminated list of
 * OPT_* values). Returns -1 to go on (positional arguments from optind), or an exit code. */
int parse_options(int argc, char **argv, const char *usage, const int *allowed, cli_options *o);

/* 1 if s is not a value of the option opt: OPT_CAMPAIGN (1 to 64 of A-Z a-z 0-9 . _ : -),
 * OPT_GPUS (all, or 1 to 4096) or OPT_GPU_IDS (digits and commas); fuzz and race, which parse
 * their own options, check theirs here too. */
int bad_option_value(int opt, const char *s);

/* The index of s in names[0..count), or -1. */
int pick(const char *s, const char *const *names, int count);

/* "tbecheck CMD: message" on stderr. */
void say_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints a failed status and returns its exit code: bad input 2, anything else 3. */
int fail_with(tbe_status s);

/* Prints usage to stderr; returns 2. */
int usage_error(const char *usage);

/* A decimal integer in [lo, hi] (no sign, no blanks); a byte count with an optional K, M, G or
 * T (powers of 1024). 0 on success. */
int parse_int(const char *s, long long lo, long long hi, long long *v);
int parse_size(const char *s, long long *v);

/* A byte count for people: "38.4 GB" (powers of 1000, as free and top print them). */
const char *human_bytes(int64_t n, char buf[32]);

/* 1 if a command-line argument is a case text (it holds '='), not a file. */
int is_case_text(const char *arg);

/* Whether the output `path` (a file, or with is_dir a directory) can be written, asked before
 * any work: -1 yes, else exit 2 after naming `what` and why. Leaves no file behind. */
int check_output_path(const char *path, int is_dir, const char *what);

/* The command line, shell-quoted, into a malloc'd string (NULL: out of memory). */
char *quote_argv(int argc, char **argv);

/* A query's rows as an aligned table (cells wider than max_width, if not 0, are cut), and the
 * one row of t as "name: value" lines. */
void print_table(const db_table *t, int max_width);
void print_record(const db_table *t);

#endif
