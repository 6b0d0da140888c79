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

/* 1 if the canonical case text still fails the same comparison; 0 if not; < 0 stops shrinking
 * (an I/O or internal error of the caller). */
typedef int (*shrink_pred)(const char *canon, void *ctx);

typedef struct {
  int tries;     /* candidates handed to the predicate */
  int accepted;  /* of those, the ones that still failed */
  int stopped;   /* the predicate returned < 0, or max_tries was reached */
} shrink_stats;

/* Shrinks the canonical case text `canon`, which fails, asking still_fails about at most
 * max_tries candidates: first dropping keys (halves, quarters, ... of the tokens, then one at a
 * time), then setting each absent shape key (T, B, E, D, L) to 1, then lowering each number of
 * each value (to 0, 1, half, minus one), again until nothing changes. *out gets the smallest
 * failing canonical text (malloc'd). TBE_EINVAL if canon does not parse and generate. */
tbe_status shrink_case(const char *canon, shrink_pred still_fails, void *ctx, int max_tries,
                       char **out, shrink_stats *stats);

/* The size shrinking lowers, compared in this order: the elements of the generated batch
 * (weights, indices, bags), the sum of the integers written in the text (each capped at 2^32:
 * fewer bad entries, a lower SL), and the tokens (dropped options). Returns 0 and fills m, or -1
 * if the text does not parse or generate. */
int shrink_measure(const char *text, long long m[3]);

/* 1 if measure a is smaller than b (lexicographically). */
int shrink_smaller(const long long a[3], const long long b[3]);

#endif
