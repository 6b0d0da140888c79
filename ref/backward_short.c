/* backward_short.c: the one-sequence sum of sorted entries (ref_bwd_sum_entries, also each chunk
 * of a long run) and the short-run row gradient (SL < threshold): the run summed as one sequence.
 * Twin of gpu/backward_short.cu; not the chunked branch (backward_long.c) nor the driver and the
 * optimizer calls (backward.c).
 *
 * Accumulation order: the entries one at a time in sorted order from +0, acc = acc + G, or
 * acc = fma(w_k, G, acc) when weighted (backward_impl.h, TBE_SEMANTICS.md section 4). The sum
 * prefetches the G rows of the entries ahead, across run ends (most runs are a single entry).
 */
#include "backward_impl.h"

#include <math.h>

#include "speed.h"

#define PREFETCH_ENTRIES 8 /* entries the sums prefetch ahead */

/* The first element of the G row entry i contributes (its bag's slice, or its position's row
 * for pooling NONE). */
static inline int64_t g_row(const ref_bwd_work *w, int64_t i, int32_t D)
{
  return w->l->bag_out ? w->l->bag_out[w->tr.bag[i]] : w->tr.pos[i] * D;
}

REF_CLONES void ref_bwd_add_row(float *acc, const float *r, int32_t D)
{
  for (int32_t d = 0; d < D; d++)
    acc[d] = acc[d] + r[d];
}

REF_CLONES static void fma_row(float *acc, float wt, const float *r, int32_t D)
{
  for (int32_t d = 0; d < D; d++)
    acc[d] = fmaf(wt, r[d], acc[d]);
}

void ref_bwd_sum_entries(const ref_bwd_work *w, int64_t s, int64_t e, int32_t D, float *acc)
{
  const float *psw = w->b->per_sample_weights;
  size_t bytes = sizeof(float) * (size_t)D;
  for (int32_t d = 0; d < D; d++)
    acc[d] = 0.0f;
  for (int64_t i = s; i < e; i++) {
    if (i + PREFETCH_ENTRIES < w->tr.n) {
      const char *ahead = (const char *)(w->g + g_row(w, i + PREFETCH_ENTRIES, D));
      for (size_t c = 0; c < bytes; c += REF_BWD_CACHE_LINE)
        __builtin_prefetch(ahead + c, 0, 2);
    }
    const float *r = w->g + g_row(w, i, D);
    if (psw)
      fma_row(acc, psw[w->tr.pos[i]], r, D);
    else
      ref_bwd_add_row(acc, r, D);
  }
}

void ref_bwd_short_grad(const ref_bwd_work *w, int64_t r, int32_t D, float *g)
{
  ref_bwd_sum_entries(w, w->tr.run_start[r], w->tr.run_start[r + 1], D, g);
}
