/* bounds.c: the bounds check of TBE_SEMANTICS.md section 2 on the CPU, in place.
 * Not the structural validation of a batch (tbe.c) and not the GPU kernel (gpu/bounds.cu).
 *
 * Order of work: (1) judge every bag's offsets with the ORIGINAL values (the last bag's end
 * taken as N) and the last offset; (2) FATAL stops at the first offending bag; otherwise the
 * offsets are repaired as the running clamp o'[0] = clamp(o[0], 0, N),
 * o'[i] = max(o'[i-1], min(o[i], N)), o'[total_B] = N, which is a prefix max; (3) the indices of
 * the repaired bags are checked: -1 stays, anything else outside [0, E_t) is invalid (FATAL: the
 * lowest position is the offender; WARNING/IGNORE: it becomes 0). The counter is an integer sum,
 * so the result does not depend on the thread count.
 */
#include "bounds.h"

#include <stdlib.h>

/* Is bag i bad, judged on the original offsets? */
static int bag_is_bad(const tbe_batch *b, int64_t total_B, int64_t i, int64_t *start,
                      int64_t *end)
{
  *start = tbe_iget(b->offsets, b->itype, i);
  *end = i == total_B - 1 ? b->N : tbe_iget(b->offsets, b->itype, i + 1);
  return *start < 0 || *start > *end || *end > b->N;
}

tbe_status ref_bounds_offender(const tbe_batch *b, const tbe_layout *l, int64_t bag,
                               int64_t position)
{
  tbe_status s;
  if (bag == l->total_B) {
    int64_t last = tbe_iget(b->offsets, b->itype, bag);
    s = tbe_error(TBE_EBOUNDS, "offsets", bag, "last offset offsets[%lld] = %lld, expected N = %lld",
                  (long long)bag, (long long)last, (long long)b->N);
    s.feature = -1;
    s.value = last;
  } else if (bag >= 0) {
    int64_t start, end;
    bag_is_bad(b, l->total_B, bag, &start, &end);
    s = tbe_error(TBE_EBOUNDS, "offsets", bag,
                  "bag %lld (feature %d): start %lld, end %lld, N %lld: %s", (long long)bag,
                  l->bag_feature[bag], (long long)start, (long long)end, (long long)b->N,
                  start < 0 ? "start < 0" : start > end ? "start > end" : "end > N");
    s.feature = l->bag_feature[bag];
    s.value = start;
  } else {
    /* the bag holding position: the last bag whose start is <= position (offsets are valid
     * when an index is the first offender, so that bag's end is past it) */
    int64_t lo = 0, hi = l->total_B - 1;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo + 1) / 2;
      if (tbe_iget(b->offsets, b->itype, mid) <= position)
        lo = mid;
      else
        hi = mid - 1;
    }
    int t = l->bag_feature[lo];
    int64_t idx = tbe_iget(b->indices, b->itype, position);
    s = tbe_error(TBE_EBOUNDS, "indices", position,
                  "index %lld at position %lld (feature %d, bag %lld) is outside [0, %lld)",
                  (long long)idx, (long long)position, t, (long long)lo,
                  (long long)b->E[b->feature_table_map[t]]);
    s.feature = t;
    s.value = idx;
    bag = lo;
  }
  s.bag = bag;
  return s;
}

tbe_status ref_bounds_check(tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                            int64_t *warnings)
{
  *warnings = 0;
  if (mode == TBE_BOUNDS_NONE)
    return tbe_ok();
  const int64_t total_B = l->total_B, N = b->N;

  /* (1) offsets, judged on the original values */
  int64_t bad_bags = 0;
  for (int64_t i = 0; i < total_B; i++) {
    int64_t start, end;
    if (bag_is_bad(b, total_B, i, &start, &end)) {
      if (mode == TBE_BOUNDS_FATAL)
        return ref_bounds_offender(b, l, i, -1);
      bad_bags++;
    }
  }
  int64_t last = tbe_iget(b->offsets, b->itype, total_B);
  int last_bad = last != N;
  if (last_bad && mode == TBE_BOUNDS_FATAL)
    return ref_bounds_offender(b, l, total_B, -1);

  /* (2) repair: running clamp (a no-op on valid offsets) */
  if (mode != TBE_BOUNDS_FATAL) {
    int64_t prev = 0;
    for (int64_t i = 0; i < total_B; i++) {
      int64_t o = tbe_iget(b->offsets, b->itype, i);
      int64_t c = o < N ? o : N;
      if (i == 0)
        prev = c < 0 ? 0 : c;
#if defined(TBE_FAULT_REPAIR_NOT_MONOTONE) /* planted: a clamp to [0, N], no running max */
      else
        prev = c < 0 ? 0 : c;
#else
      else if (c > prev)
        prev = c;
#endif
      tbe_iset(b->offsets, b->itype, i, prev);
    }
    tbe_iset(b->offsets, b->itype, total_B, N);
  }

  /* (3) indices of the (repaired) bags */
  int64_t invalid = 0, first_bad = INT64_MAX;
  const int repair = mode != TBE_BOUNDS_FATAL;
#pragma omp parallel for schedule(dynamic, 256) reduction(+ : invalid) reduction(min : first_bad)
  for (int64_t i = 0; i < total_B; i++) {
    int64_t E = b->E[b->feature_table_map[l->bag_feature[i]]];
    int64_t start = tbe_iget(b->offsets, b->itype, i);
    int64_t end = tbe_iget(b->offsets, b->itype, i + 1);
    for (int64_t p = start; p < end; p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      if (idx == -1 || (idx >= 0 && idx < E))
        continue;
      invalid++;
#if defined(TBE_FAULT_FATAL_HIGHEST) /* planted: the highest position, negated for the min */
      first_bad = -p < first_bad ? -p : first_bad;
#else
      if (p < first_bad)
        first_bad = p;
#endif
      if (repair)
        tbe_iset(b->indices, b->itype, p, 0);
    }
  }
#if defined(TBE_FAULT_FATAL_HIGHEST)
  first_bad = -first_bad;
#endif
  if (invalid && mode == TBE_BOUNDS_FATAL)
    return ref_bounds_offender(b, l, -1, first_bad);
  if (mode == TBE_BOUNDS_WARNING)
    *warnings = last_bad + bad_bags + invalid;
  return tbe_ok();
}
