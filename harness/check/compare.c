/* compare.c: the named metrics `bitwise` and `bound_ratio` over outputs and integer arrays.
 * Not a tolerance chooser: bounds come from ref/ (forward_exact.c), never from here.
 */
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"

const char *cmp_metric_name(cmp_metric m) { return m == CMP_BITWISE ? "bitwise" : "bound_ratio"; }

tbe_status cmp_init(cmp_result *r, cmp_metric m, int cap)
{
  memset(r, 0, sizeof *r);
  r->metric = m;
  r->cap = cap;
  if (cap > 0 && !(r->first = malloc(sizeof(cmp_violation) * (size_t)cap)))
    return tbe_error(TBE_ENOMEM, "violations", -1, "cannot allocate %d violation records", cap);
  return tbe_ok();
}

void cmp_free(cmp_result *r)
{
  free(r->first);
  memset(r, 0, sizeof *r);
}

static uint32_t bits_of(tbe_dtype t, const void *a, int64_t i)
{
  if (t == TBE_FP32) {
    uint32_t u;
    memcpy(&u, (const float *)a + i, sizeof u);
    return u;
  }
  return ((const uint16_t *)a)[i];
}

double cmp_value(tbe_dtype t, const void *a, int64_t i)
{
  switch (t) {
  case TBE_FP16: return ref_half_to_float(((const uint16_t *)a)[i]);
  case TBE_BF16: return ref_bf16_to_float(((const uint16_t *)a)[i]);
  case TBE_FP32: break;
  }
  return ((const float *)a)[i];
}

int64_t cmp_ulp_distance(tbe_dtype t, uint32_t a, uint32_t b)
{
  int bits = t == TBE_FP32 ? 32 : 16;
  uint32_t sign = 1u << (bits - 1);
  /* sign-magnitude to an ordered integer: negative values count down from 0 */
  int64_t oa = (a & sign) ? -(int64_t)(a & (sign - 1)) : (int64_t)a;
  int64_t ob = (b & sign) ? -(int64_t)(b & (sign - 1)) : (int64_t)b;
  return oa > ob ? oa - ob : ob - oa;
}

static void record(cmp_result *r, int64_t i, double expected, double got, double bound)
{
  if (r->violations < r->cap) {
    cmp_violation *v = &r->first[r->violations];
    v->index = i;
    v->expected = expected;
    v->got = got;
    v->bound = bound;
  }
  r->violations++;
}

/* Accumulates abs/rel error of got against want into r. */
static void track_error(cmp_result *r, double want, double got)
{
  double err = fabs(got - want);
  if (err != err)
    return;
  if (err > r->max_abs)
    r->max_abs = err;
  if (want != 0 && err / fabs(want) > r->max_rel)
    r->max_rel = err / fabs(want);
}

void cmp_bitwise(cmp_result *r, tbe_dtype t, const void *expected, const void *got, int64_t n)
{
#if defined(TBE_FAULT_CMP_SKIP_LAST) /* planted: the last element is never compared */
  n = n > 0 ? n - 1 : 0;
#endif
  for (int64_t i = 0; i < n; i++) {
    r->elements++;
    uint32_t a = bits_of(t, expected, i), b = bits_of(t, got, i);
    double va = cmp_value(t, expected, i), vb = cmp_value(t, got, i);
    if (a == b) {
      r->exact++;
      continue;
    }
    if (isnan(va) && isnan(vb)) { /* both NaN: equal whatever the payload */
      r->exact++;
      continue;
    }
    if (isnan(va) || isnan(vb))
      r->max_ulp = INT64_MAX;
    else {
      int64_t u = cmp_ulp_distance(t, a, b);
      if (u > r->max_ulp)
        r->max_ulp = u;
      track_error(r, va, vb);
    }
    record(r, i, va, vb, 0);
  }
}

void cmp_bitwise_int(cmp_result *r, tbe_itype t, const void *expected, const void *got,
                     int64_t n)
{
#if defined(TBE_FAULT_CMP_SKIP_LAST) /* planted: the last element is never compared */
  n = n > 0 ? n - 1 : 0;
#endif
  for (int64_t i = 0; i < n; i++) {
    r->elements++;
    int64_t a = tbe_iget(expected, t, i), b = tbe_iget(got, t, i);
    if (a == b) {
      r->exact++;
      continue;
    }
    int64_t u = a > b ? a - b : b - a;
    if (u > r->max_ulp)
      r->max_ulp = u;
    record(r, i, (double)a, (double)b, 0);
  }
}

/* Smallest magnitude that rounds to Inf in dtype t: the largest finite value plus half its ulp. */
static double overflow_threshold(tbe_dtype t)
{
  switch (t) {
  case TBE_FP16: return 65520.0;
  case TBE_BF16: return 0x1.ffp127;
  case TBE_FP32: break;
  }
  return 0x1.ffffffp127;
}

void cmp_bound(cmp_result *r, tbe_dtype t, const double *exact, const double *bound,
               const void *got, int64_t n)
{
#if defined(TBE_FAULT_CMP_SKIP_LAST) /* planted: the last element is never compared */
  n = n > 0 ? n - 1 : 0;
#endif
  for (int64_t i = 0; i < n; i++) {
    r->elements++;
    double g = cmp_value(t, got, i), e = exact[i];
    if (!isfinite(e)) {
      /* the exact value is Inf or NaN by IEEE arithmetic on the inputs (TBE_SEMANTICS.md 6):
       * an Inf must be matched in sign, a NaN by a NaN; no bound applies */
      if ((isnan(e) && isnan(g)) || g == e)
        r->exact++;
      else
        record(r, i, e, g, 0);
      continue;
    }
    if (!(bound[i] >= 0 && bound[i] < INFINITY)) {
      /* a finite exact value with no finite bound: nothing is checked, so it fails */
      r->no_bound++;
      r->worst_bound_ratio = INFINITY;
      record(r, i, e, g, INFINITY);
      continue;
    }
    if (isnan(g)) {
      record(r, i, e, g, bound[i]);
      continue;
    }
    if (isinf(g)) {
      /* a finite exact value may store as Inf when the values within its bound reach the
       * dtype's overflow threshold (the store rounds to Inf), in the sign of the value */
      if (!((g > 0) == (e > 0) && fabs(e) + bound[i] >= overflow_threshold(t)))
        record(r, i, e, g, bound[i]);
      continue;
    }
    double err = fabs(g - e);
    if (err == 0)
      r->exact++;
    track_error(r, e, g);
    double ratio = err == 0 ? 0 : bound[i] > 0 ? err / bound[i] : INFINITY;
    if (ratio > r->worst_bound_ratio)
      r->worst_bound_ratio = ratio;
    if (err > bound[i])
      record(r, i, e, g, bound[i]);
  }
}
