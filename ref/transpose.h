/* transpose.h: the backward's transpose (TBE_SEMANTICS.md section 4): every lookup's linear key
 * (its table's first key + row), sorted stably, cut into runs of equal keys with their segment
 * lengths. Not the gradient sums (backward_short.c, backward_long.c): nothing here reads weights
 * or gradients.
 *
 * Invariant of a built ref_transpose: entries are the positions p inside bags whose index is not
 * -1, ordered by key and, within a key, by position (so by feature, bag, position); run r is the
 * entries [run_start[r], run_start[r + 1]), all with one key, and consecutive runs have
 * increasing keys; SL of run r is run_start[r + 1] - run_start[r] >= 1. The result is a function
 * of the batch alone: any OpenMP thread count gives the same arrays.
 */
#ifndef REF_TRANSPOSE_H
#define REF_TRANSPOSE_H

#include <stdint.h>

#include "tbe.h"

typedef struct {
  int64_t n;            /* entries */
  uint64_t *key;        /* [n] linear keys, ascending */
  int64_t *pos;         /* [n] position of each entry in indices */
  int32_t *bag;         /* [n] bag of each entry */
  int64_t num_runs;
  int64_t *run_start;   /* [num_runs + 1], run_start[num_runs] = n */
  int64_t *rows_cumsum; /* [num_tables + 1] first key of each table; the last is the total rows */
} ref_transpose;

/* Builds the transpose of a validated, bounds-checked batch: every index must be in [0, E) of
 * its table or -1 (TBE_EINVAL naming the first position that is not), offsets must be repaired
 * (nondecreasing within [0, N]). Sorts with a parallel LSD radix sort (11-bit digits over the
 * key's significant bits; keys up to 2^46). Returns TBE_ENOMEM if the arrays do not fit. */
tbe_status ref_transpose_build(const tbe_batch *b, const tbe_layout *l, ref_transpose *tr);
void ref_transpose_free(ref_transpose *tr);

/* The table of run r's entries (from the feature of its first entry) and the row in it. */
int32_t ref_transpose_table(const ref_transpose *tr, const tbe_batch *b, const tbe_layout *l,
                            int64_t r, int64_t *row);

#endif
