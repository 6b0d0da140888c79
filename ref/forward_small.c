/* forward_small.c: the model of the small-table tensor-core path's order (histogram counts times
 * the table in 16-row K chunks, each chunk added with round-toward-zero) and its eligibility.
 * Not the normative forward (forward.c), and not a bound: forward_exact.c bounds this path.
 *
 * Accumulation order (the model): chunk sums are exact (counts <= 256 times fp16 values are
 * integers in units of 2^-24 below 2^48, sixteen of them below 2^52, so an int64 holds them);
 * each is added to the fp32 accumulator C with one round-toward-zero; positions past the first
 * 256 are then added one at a time with __fadd_rn semantics; MEAN multiplies by fl(1/L).
 */
#include "forward_small.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"

int ref_small_eligible(const tbe_batch *b, int32_t t)
{
  int32_t j = b->feature_table_map[t];
  return b->wdtype == TBE_FP16 && b->out_dtype == TBE_FP32 && b->pool != TBE_POOL_NONE &&
         !b->per_sample_weights && b->R == 0 && b->E[j] <= REF_SMALL_MAX_E && b->D[j] >= 64 &&
         b->D[j] <= 128 && b->D[j] % 8 == 0;
}

/* fp16 bits as an integer number of 2^-24 (exact: every fp16 value is one). */
static int64_t half_units(uint16_t h)
{
  return (int64_t)ldexp((double)ref_half_to_float(h), 24);
}

/* RZ_fp32(c + s * 2^-24), exactly. */
static float add_rz(float c, int64_t s)
{
  double a = (double)c, bb = ldexp((double)s, -24); /* both exact in double */
  double sum = a + bb;
  double bv = sum - a;
  double err = (a - (sum - bv)) + (bb - bv); /* TwoSum: exact = sum + err */
  float f = (float)sum;                      /* RN; RZ(exact) is f or one step toward zero */
  double d = (double)f - sum;                /* exact (Sterbenz) */
  double over = d - err;                     /* sign of f - exact */
  if ((f > 0 && over > 0) || (f < 0 && over < 0))
    f = nextafterf(f, 0.0f);
  return f;
}

tbe_status ref_forward_small_model(const tbe_batch *b, const tbe_layout *l,
                                   const unsigned char *mask, float *out)
{
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < l->total_B; i++) {
    int32_t t = l->bag_feature[i];
    if (!mask[t])
      continue;
    int32_t j = b->feature_table_map[t], D = b->D[j];
    int64_t E = b->E[j];
    const uint16_t *W = (const uint16_t *)b->weights + b->table_offset[j];
    int64_t start = tbe_iget(b->offsets, b->itype, i), end = tbe_iget(b->offsets, b->itype, i + 1);
    int32_t count[REF_SMALL_MAX_E] = {0};
    int64_t hist_end = end - start > REF_SMALL_HIST ? start + REF_SMALL_HIST : end;
    for (int64_t p = start; p < hist_end; p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      if (idx != -1)
        count[idx]++;
    }
    float *o = out + l->bag_out[i];
    for (int32_t d = 0; d < D; d++) {
      float c = 0.0f;
      for (int64_t r0 = 0; r0 < E; r0 += REF_SMALL_K) {
        int64_t s = 0;
        for (int64_t r = r0; r < r0 + REF_SMALL_K && r < E; r++)
          s += count[r] * half_units(W[r * D + d]);
        c = add_rz(c, s);
      }
      for (int64_t p = hist_end; p < end; p++) {
        int64_t idx = tbe_iget(b->indices, b->itype, p);
        if (idx != -1)
          c = c + ref_half_to_float(W[idx * D + d]);
      }
      if (b->pool == TBE_POOL_MEAN && end > start)
        c = c * (1.0f / (float)(end - start));
      o[d] = c;
    }
  }
  return tbe_ok();
}
