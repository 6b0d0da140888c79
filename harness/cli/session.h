/* session.h: what run, import, replay and export share: the engines opened once, an injected fault's
 * landing, the memory check, the run session (database, engines, progress) and case lists. Not
 * the options (options.h) nor a command.
 */
#ifndef HARNESS_SESSION_H
#define HARNESS_SESSION_H

#include <stdint.h>

#include "case.h"
#include "held.h"
#include "options.h"
#include "progress.h"

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

/* A run session: database, engines, progress, shared by run and import.
 *
 * Hold (a run with --inject-fault): a fault that lands nowhere refuses the run (exit 2), which
 * must leave the database as it was, and whether it lands is known only once a case has run.
 * So the run row and the results are held in memory until the fault first lands, then stored,
 * and the run goes on case by case; a run whose fault never landed writes nothing, and removes
 * the database file it created. */
typedef struct {
  const cli_options *o;
  db *d;
  eng_ctx *x;
  int64_t run;
  int live;        /* stdout is a terminal: one progress line, redrawn */
  progress prog;
  int64_t failed;  /* case runs with a failure or an error */
  fault_seen fault;
  int hold;        /* results are held until the fault lands (above) */
  int created;     /* the database file did not exist before session_open */
  char *argv_text; /* the command line, for the held run row */
  held_list held;
} session;

/* Opens the engines and the database and begins run of `total` case runs (hold: the run row
 * waits for session_close). -1 or an exit code. */
int session_open(session *s, const cli_options *o, int argc, char **argv, int64_t total);

/* Stores one case's result and reports it; holding: takes r over (it is left empty) and stores
 * it once the fault lands. -1 to go on, or an exit code. */
int session_case(session *s, const char *canon, int repeat, eng_case_result *r);

/* Ends the run of `cases` cases, each `repeats` times: refuses a run whose fault landed nowhere
 * (nothing stored), else marks it complete, prints the summary and a warning for what did not
 * run. Returns the exit code. */
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

#endif
