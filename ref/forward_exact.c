/* forward_exact.c: the forward's exact value per output element, with the bound on how far
 * ref_forward (and any order-free GPU path) may be from it. Not the normative forward (forward.c).
 *
 * Exact sums: each term x = w*r is exact in fp64 (24-bit by <= 24-bit significands); terms are
 * summed with TwoSum into (hi, lo) (Ogita-Rump-Oishi Sum2: |hi+lo - S| <= u64*|S| +
 * gamma64(n-1)^2 * sum|x|), then rounded once to double.
 *
 * Bound of the computed output y against the exact S (u_a: the accumulator's unit roundoff,
 * n: terms of the bag (positions that are not -1), A = sum|x_i| >= |S|):
 *   sum:   k chained roundings, k = n-1 unweighted (the first add to +0 is exact), n weighted
 *          (fma(w, r, +0) rounds w*r): |acc - S| <= e = gamma_a(k) * A.
 *   MEAN:  y = fl(acc * fl(1/fl(L))): |y - S/L| <= e/L * (1 + g) + g * A/L with g = gamma_a(2),
 *          gamma_a(3) when fl(L) itself rounds (L > 2^24 with an fp32 accumulator).
 *   store: one rounding into the output dtype when it is narrower than the accumulator:
 *          half an ulp of the binade of |S| + e, or half the subnormal spacing
 *          (ref_store_error).
 *   tensor-core path (ref_forward_exact_tc), from the model ref_mma_f16_f32 (forward_small.h):
 *          each of the K chunk steps that holds a counted row takes C and 16 products x = c*w
 *          (count c, fp16 w) and returns RZ(sum of the terms truncated toward zero to multiples
 *          of 2^q), q = emax - 25. The term at emax is exact (its last bit is at emax - 23 or
 *          higher), each other one loses < 2^q, so truncation costs < 16 * 2^-25 * 2^emax. The
 *          alignment sees 2^(exponent), not |x|: 2^(ec+ew) <= c * max(|w|, 2^-14) (ew = -14
 *          for a subnormal w) and 2^(exponent of C) <= max(|C|, 2^-126); truncation and RZ never
 *          grow a magnitude, so |C| <= the histogram's sum|x| <= A and 2^emax <= A + s + 2^-126,
 *          s = 2^-14 * (histogram hits whose w is subnormal). The final RZ costs < 2^-23 * A
 *          (ulp <= 2^-23 * magnitude), or < 2^-149 when subnormal. The steps' errors add, and
 *          the t positions past the first 256 are RN adds onto a sum bounded by A:
 *          e = K * ((16 * 2^-25 + 2u) * A + 16 * 2^-25 * (s + 2^-126) + 2^-149)
 *              + gamma(t) * A.
 *          (forward_small_test holds a crafted bag that comes close to e; bench/RESULTS.md
 *          keeps its figures and the history of this bound.)
 *   exact: the double we return is itself off by u64*|S| (twice for MEAN) + gamma64(n)^2 * A.
 * Inf and NaN terms (non-finite weights: valid input) are summed apart, in IEEE arithmetic: when
 * a bag holds any, its exact value is their sum (+-Inf, or NaN for a NaN or Infs of both signs;
 * MEAN keeps it, as Inf/L and NaN/L do), with bound 0 (TBE_SEMANTICS.md 6: matched, not bounded).
 * The bound is the sum of these terms; A is taken as computed * (1 + 2*gamma64(n)) to cover its
 * own rounding.
 */
#include "forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "error_bound.h"
#include "forward_small.h"
#include "half.h"

static double weight_at(const tbe_batch *b, int64_t e)
{
  switch (b->wdtype) {
  case TBE_FP16: return ref_half_to_float(((const uint16_t *)b->weights)[e]);
  case TBE_BF16: return ref_bf16_to_float(((const uint16_t *)b->weights)[e]);
  case TBE_FP32: break;
  }
  return ((const float *)b->weights)[e];
}

/* hi[d], lo[d], abs[d] over the bag's finite terms, and inf[d] the IEEE sum of its Inf and NaN
 * terms (0 when there are none: then the exact value is hi + lo, else it is inf[d]); returns n,
 * the number of terms. */
static int64_t exact_bag(const tbe_batch *b, int32_t j, int64_t start, int64_t end, double *hi,
                         double *lo, double *abs_sum, double *inf)
{
  int32_t D = b->D[j];
  for (int32_t d = 0; d < D; d++)
    hi[d] = lo[d] = abs_sum[d] = inf[d] = 0.0;
  int64_t n = 0;
  for (int64_t p = start; p < end; p++) {
    int64_t idx = tbe_iget(b->indices, b->itype, p);
    if (idx == -1)
      continue;
    n++;
    double w = b->per_sample_weights ? (double)b->per_sample_weights[p] : 1.0;
    int64_t row = b->table_offset[j] + idx * D;
    for (int32_t d = 0; d < D; d++) {
      double x = w * weight_at(b, row + d); /* exact */
      if (!isfinite(x)) {
        inf[d] += x;
        continue;
      }
      double s = hi[d] + x;
      double bb = s - hi[d];
      lo[d] += (hi[d] - (s - bb)) + (x - bb);
      hi[d] = s;
      abs_sum[d] += fabs(x);
    }
  }
  return n;
}

/* Does storing into the output dtype round (is it narrower than the accumulator, or for pooling
 * NONE, than the weights)? */
static int narrowing_store(const tbe_batch *b, int fp64_acc)
{
  if (b->pool == TBE_POOL_NONE)
    return b->out_dtype != b->wdtype && b->out_dtype != TBE_FP32;
  return fp64_acc || b->out_dtype != TBE_FP32;
}

/* The tensor-core path's steps on one bag (see the header comment): K chunk steps that hold a
 * counted row, t positions past the histogram that hold a row, and per column s[d]. */
typedef struct {
  int64_t steps, tail;
  const double *sub;
} tc_path;

/* The bound of one pooled element (see the header comment); tc != NULL selects the tensor-core
 * path's error with column d's subnormal allowance tc->sub[d]. */
static double pooled_bound(const tbe_batch *b, int fp64_acc, int fp32_group, int64_t n,
                           int64_t L, double exact, double A, const tc_path *tc, int32_t d)
{
  const double ua = fp64_acc ? REF_U64 : REF_U32;
  A *= 1.0 + 2.0 * ref_gamma(n, REF_U64);
  double e;
  if (tc) {
    const double trunc = ldexp(REF_SMALL_K, -REF_MMA_ALIGN_BITS);
    e = (double)tc->steps * ((trunc + 2 * ua) * A + trunc * (tc->sub[d] + 0x1p-126) + 0x1p-149) +
        ref_gamma(tc->tail, ua) * A;
  } else {
    e = ref_gamma(b->per_sample_weights ? n : (n > 0 ? n - 1 : 0), ua) * A;
  }
  /* fp32 groups into an fp64 accumulator: a full group's terms take fp32_group - 1 fp32 adds,
   * or a mul and fp32_group - 1 fmas when weighted, where each tail product is rounded to fp32
   * too (with an fp32 accumulator the any-order bound above covers them) */
  if (fp64_acc && fp32_group && (L >= fp32_group || b->per_sample_weights))
    e += ref_gamma(b->per_sample_weights ? fp32_group : fp32_group - 1, REF_U32) * A;
  double repr = REF_U64 * fabs(exact) + ref_gamma(n, REF_U64) * ref_gamma(n, REF_U64) * A;
  if (b->pool == TBE_POOL_MEAN && L > 0) {
    double g = ref_gamma(!fp64_acc && L > (INT64_C(1) << 24) ? 3 : 2, ua);
    e = e / (double)L * (1.0 + g) + g * A / (double)L;
    repr += REF_U64 * fabs(exact);
  }
  double store =
      narrowing_store(b, fp64_acc) ? ref_store_error(b->out_dtype, fabs(exact) + e) : 0.0;
  return e + store + repr;
}

/* The tensor-core path's steps on one bag of table j; sub (D values) receives s[d]. */
static tc_path tc_steps(const tbe_batch *b, int32_t j, int64_t start, int64_t end, double *sub)
{
  const int32_t D = b->D[j];
  const uint16_t *W = (const uint16_t *)b->weights + b->table_offset[j];
  unsigned char hit[REF_SMALL_MAX_E / REF_SMALL_K] = {0};
  tc_path tc = {0, 0, sub};
  for (int32_t d = 0; d < D; d++)
    sub[d] = 0.0;
  for (int64_t p = start; p < end; p++) {
    const int64_t idx = tbe_iget(b->indices, b->itype, p);
    if (idx == -1)
      continue;
    if (p >= start + REF_SMALL_HIST) {
      tc.tail++;
      continue;
    }
    hit[idx / REF_SMALL_K] = 1;
    for (int32_t d = 0; d < D; d++) {
      const uint16_t w = W[idx * D + d];
      if (!(w & 0x7C00) && (w & 0x3FF))
        sub[d] += 0x1p-14;
    }
  }
  for (int k = 0; k < REF_SMALL_MAX_E / REF_SMALL_K; k++)
    tc.steps += hit[k];
  return tc;
}

/* The exact values and bounds, with an fp64 accumulator for fp32 weights (fp64_acc) or fp32,
 * and rows first summed in fp32 groups of fp32_group rows (0: none). */
static tbe_status forward_exact(const tbe_batch *b, const tbe_layout *l,
                                const unsigned char *tc_mask, int fp64_acc, int fp32_group,
                                double *exact, double *bound)
{
  int threads = omp_get_max_threads();
  double *scratch = malloc(sizeof(double) * 5 * (size_t)l->max_D * (size_t)threads);
  if (!scratch)
    return tbe_error(TBE_ENOMEM, "scratch", -1, "cannot allocate exact-forward scratch");
  if (b->pool == TBE_POOL_NONE) {
    memset(exact, 0, sizeof(double) * (size_t)l->out_elems);
    memset(bound, 0, sizeof(double) * (size_t)l->out_elems);
  }
#pragma omp parallel num_threads(threads)
  {
    double *hi = scratch + 5 * (size_t)l->max_D * (size_t)omp_get_thread_num();
    double *lo = hi + l->max_D, *A = lo + l->max_D, *sub = A + l->max_D, *inf = sub + l->max_D;
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < l->total_B; i++) {
      int32_t j = b->feature_table_map[l->bag_feature[i]];
      int32_t D = b->D[j];
      int64_t start = tbe_iget(b->offsets, b->itype, i);
      int64_t end = tbe_iget(b->offsets, b->itype, i + 1);
      if (b->pool == TBE_POOL_NONE) {
        for (int64_t p = start; p < end; p++) {
          int64_t idx = tbe_iget(b->indices, b->itype, p);
          for (int32_t d = 0; idx != -1 && d < D; d++) {
            double v = weight_at(b, b->table_offset[j] + idx * D + d);
            exact[p * D + d] = v;
            bound[p * D + d] = narrowing_store(b, fp64_acc) && isfinite(v)
                                   ? ref_store_error(b->out_dtype, fabs(v))
                                   : 0.0;
          }
        }
        continue;
      }
      int64_t n = exact_bag(b, j, start, end, hi, lo, A, inf);
      int64_t L = end - start;
      const int on_tc = tc_mask && tc_mask[l->bag_feature[i]];
      const tc_path tc = on_tc ? tc_steps(b, j, start, end, sub) : (tc_path){0, 0, NULL};
      for (int32_t d = 0; d < D; d++) {
        double v = hi[d] + lo[d];
        if (b->pool == TBE_POOL_MEAN && L > 0)
          v = v / (double)L;
        exact[l->bag_out[i] + d] = inf[d] != 0 ? inf[d] : v;
        bound[l->bag_out[i] + d] =
            inf[d] != 0 ? 0.0
                        : pooled_bound(b, fp64_acc, fp32_group, n, L, v, A[d],
                                       on_tc ? &tc : NULL, d);
      }
    }
  }
  free(scratch);
  return tbe_ok();
}

tbe_status ref_forward_exact(const tbe_batch *b, const tbe_layout *l, double *exact,
                             double *bound)
{
  return forward_exact(b, l, NULL, b->wdtype == TBE_FP32, 0, exact, bound);
}

tbe_status ref_forward_exact_tc(const tbe_batch *b, const tbe_layout *l,
                                const unsigned char *tc_mask, double *exact, double *bound)
{
  return forward_exact(b, l, tc_mask, b->wdtype == TBE_FP32, 0, exact, bound);
}

tbe_status ref_forward_exact_acc(const tbe_batch *b, const tbe_layout *l, int fp64_acc,
                                 int fp32_group, double *exact, double *bound)
{
  return forward_exact(b, l, NULL, fp64_acc && b->wdtype == TBE_FP32, fp32_group, exact,
                       bound);
}
