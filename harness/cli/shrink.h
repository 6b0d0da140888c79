/* shrink.h: delta debugging over a case's keys: the smallest case text (fewer keys, smaller
 * numbers) that still fails the way a predicate says. Not the campaign that finds failures
 * (fuzz_campaign.c) nor the case language (case.h).
 *
 * Invariant: every case shrink_case tries is canonical, generates, and is strictly smaller than
 * the current best by shrink_measure, so it ends; the result is the last accepted case, which
 * the predicate said still fails (or the input itself, when nothing was accepted).
 */
#ifndef HARNESS_SHRINK_H
#define HARNESS_SHRINK_H

#include <stddef.h>

#include "tbe.h"

/* What a predicate may answer besides 1 (the canonical case text still fails the same
 * comparison) and 0 (it does not): both stop shrinking. */
#define SHRINK_ERROR (-1)   /* an I/O or internal error of the caller */
#define SHRINK_NO_TIME (-2) /* the candidate cannot be run before the caller's deadline */
typedef int (*shrink_pred)(const char *canon, void *ctx);

/* Why shrinking ended. Any but SHRINK_DONE means it was cut short: the result is the smallest
 * failing case found so far, not necessarily a minimal one. */
typedef enum {
  SHRINK_DONE = 0, /* a whole pass changed nothing */
  SHRINK_TRIES,    /* max_tries candidates were tried */
  SHRINK_TIME,     /* the deadline came, or the predicate answered SHRINK_NO_TIME */
  SHRINK_FAILED    /* the predicate answered SHRINK_ERROR, or out of memory */
} shrink_stop;

typedef struct {
  int tries;           /* candidates handed to the predicate */
  int accepted;        /* of those, the ones that still failed */
  shrink_stop stopped;
} shrink_stats;

/* "" for SHRINK_DONE, else why shrinking was cut short ("out of time", ...). */
const char *shrink_stop_reason(shrink_stop s);

/* Shrinks the canonical case text `canon`, which fails, asking still_fails about at most
 * max_tries candidates and none once eng_now_ms() (engine.h) has reached deadline_ms: first
 * dropping keys (halves, quarters, ... of the tokens, then one at a time), then setting each
 * absent shape key (T, B, E, D, L) to 1, then lowering each number of each value (to 0, 1,
 * half, minus one), again until nothing changes. *out gets the smallest failing canonical text
 * (malloc'd), also when cut short. TBE_EINVAL if canon does not parse and generate. */
tbe_status shrink_case(const char *canon, shrink_pred still_fails, void *ctx, int max_tries,
                       double deadline_ms, char **out, shrink_stats *stats);

/* The size shrinking lowers, compared in this order: the elements of the generated batch
 * (weights, indices, bags), the sum of the integers written in the text (each capped at 2^32:
 * fewer bad entries, a lower SL), and the tokens (dropped options). Returns 0 and fills m, or -1
 * if the text does not parse or generate. */
int shrink_measure(const char *text, long long m[3]);

/* 1 if measure a is smaller than b (lexicographically). */
int shrink_smaller(const long long a[3], const long long b[3]);

#endif
