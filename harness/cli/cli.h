/* cli.h: what the commands of tbecheck share: exit codes, the options every command parses,
 * error printing, tables, the run session (database, engines, progress) and case lists. Not a
 * library: only the tbecheck program includes it, and only it prints and chooses exit codes.
 *
 * Exit codes, one rule for every command: 0 all passed, 1 failures found, 2 bad usage or bad
 * input (what the command was given is wrong, missing or not what it must be: options, cases,
 * case files, .npy files, a database or a run or result that does not exist, a fault that
 * lands nowhere, a case too big for this machine), 3 I/O or internal error while it worked
 * (a write that failed, a full disk, out of memory). A command ends on the first exit code
 * above 1; bad input is found before anything is written wherever it can be.
 */
#ifndef HARNESS_CLI_H
#define HARNESS_CLI_H

#include <stdint.h>

#include "case.h"
#include "db.h"
#include "engine.h"
#include "import.h"
#include "progress.h"

enum { EXIT_PASS = 0, EXIT_FAILURES = 1, EXIT_USAGE = 2, EXIT_INTERNAL = 3 };

#define DEFAULT_DB "tbecheck.db"
#define DEFAULT_ENGINES "ref,gpu,oracle"
#define DEFAULT_MAX_VIOLATIONS 10

/* The command running ("run", "report", ...), which error messages name. */
extern const char *command_name;

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

/* Parses the options of a command that accepts those in `allowed` (a 0-terminated list of
 * OPT_* values). Returns -1 to go on (positional arguments from optind), or an exit code. */
int parse_options(int argc, char **argv, const char *usage, const int *allowed, cli_options *o);

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

/* The command line, shell-quoted, into a malloc'd string (NULL: out of memory). */
char *quote_argv(int argc, char **argv);

/* A query's rows as an aligned table (cells wider than max_width, if not 0, are cut), and the
 * one row of t as "name: value" lines. */
void print_table(const db_table *t, int max_width);
void print_record(const db_table *t);

/* Opens the engines and prints what cannot run here, once; a fault aimed at an engine that
 * does not run is bad usage. Returns -1 or an exit code; *x must be closed either way. */
int open_engines(const cli_options *o, eng_ctx **x);

/* Where the fault of a run landed, over its cases. */
typedef struct {
  int landed;
  int64_t most; /* the longest that output was in a case (0 or less: never produced) */
} fault_seen;

/* Notes where a case's fault landed; exit 2 (fault_check) when o asked for a fault and it
 * landed in no case (it would have tested nothing), else -1. */
void fault_note(fault_seen *f, const eng_case_result *r);
int fault_check(const cli_options *o, const fault_seen *f);

/* Refuses (exit 2) a case whose estimated memory is more than this machine has for it;
 * -1 when it fits. */
int check_memory(const tbe_case *c, const char *canon, const cli_options *o);

/* A run session: database, engines, progress, shared by run and import. */
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

/* Opens the engines and the database and begins run of `total` case runs. -1 or an exit code. */
int session_open(session *s, const cli_options *o, int argc, char **argv, int64_t total);

/* Stores one case's result and reports it. -1 to go on, or an exit code. */
int session_case(session *s, const char *canon, int repeat, const eng_case_result *r);

/* Ends the run of `cases` cases, each `repeats` times: marks it complete, prints the summary
 * and a warning for what did not run. Returns the exit code. */
int session_close(session *s, int64_t cases, int repeats);
void session_free(session *s);

typedef struct {
  tbe_case *c;
  char *canon;
} parsed_case;

/* Parses one case text, naming `where` in errors; appends it to *v, *n. -1 or an exit code. */
int add_case(const char *text, const char *where, parsed_case **v, int64_t *n);

/* Reads and parses every case of the arguments (case texts and case files) into *v, *n.
 * Returns -1 or an exit code. */
int collect_cases(int argc, char **argv, parsed_case **v, int64_t *n);
void free_cases(parsed_case *v, int64_t n);

/* The commands: each takes its own argv (argv[0] is the command's name); returns the exit code. */
int cmd_run(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_export(int argc, char **argv);

#endif
