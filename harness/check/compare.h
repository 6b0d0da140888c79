/* compare.h: the one place outputs are compared, through named metrics: `bitwise` (every element
 * bit-identical) and `bound_ratio` (|got - exact| <= bound per element). Not the math (ref/).
 *
 * Every comparison fills the same cmp_result: elements, bit-exact count, max ulp distance,
 * max abs and relative error, the worst error/bound ratio (bound metric), and the violations,
 * the first `cap` of them with coordinates. NaN rules (TBE_SEMANTICS.md section 6): bitwise,
 * NaN on either side is a violation unless both are NaN (a reference NaN comes from NaN or Inf
 * inputs); bound, an exact value that is Inf or NaN (by IEEE arithmetic on the inputs) must be
 * matched by the same Inf or by a NaN, a finite one must come with a finite bound (else the
 * element fails, counted in no_bound), and a NaN got fails; an Inf must match in sign.
 */
#ifndef HARNESS_COMPARE_H
#define HARNESS_COMPARE_H

#include <stdint.h>

#include "tbe.h"

typedef enum { CMP_BITWISE = 0, CMP_BOUND = 1 } cmp_metric;

typedef struct {
  int64_t index;    /* element index into the output */
  double expected;  /* reference value (bitwise) or exact value (bound) */
  double got;
  double bound;     /* 0 for bitwise */
} cmp_violation;

typedef struct {
  cmp_metric metric;
  int64_t elements;
  int64_t exact;             /* elements with identical bits */
  int64_t max_ulp;           /* largest distance in units in the last place of the dtype */
  double max_abs, max_rel;
  double worst_bound_ratio;  /* CMP_BOUND: max |got - exact| / bound (0/0 counts as 0) */
  int64_t violations;        /* elements that fail the metric */
  int64_t no_bound;          /* CMP_BOUND: finite exact values whose bound is NaN or Inf (each
                              * a violation, recorded with bound +Inf) */
  cmp_violation *first;      /* the first min(violations, cap) violations */
  int cap;
} cmp_result;

const char *cmp_metric_name(cmp_metric m);

/* Prepares r for up to cap recorded violations (cap may be 0). Returns TBE_ENOMEM on failure. */
tbe_status cmp_init(cmp_result *r, cmp_metric m, int cap);
void cmp_free(cmp_result *r);

/* bitwise: n elements of dtype t (16-bit types as bits) */
void cmp_bitwise(cmp_result *r, tbe_dtype t, const void *expected, const void *got, int64_t n);

/* bitwise over integer arrays (repaired indices and offsets) */
void cmp_bitwise_int(cmp_result *r, tbe_itype t, const void *expected, const void *got,
                     int64_t n);

/* bound_ratio: got (dtype t) against exact +- bound, per element (NaN rules above) */
void cmp_bound(cmp_result *r, tbe_dtype t, const double *exact, const double *bound,
               const void *got, int64_t n);

/* The value of element i of an output of dtype t, widened to double. */
double cmp_value(tbe_dtype t, const void *a, int64_t i);

/* Distance in ulps between two values of dtype t given as bits (ordered-integer difference;
 * +0 and -0 are 0 apart). */
int64_t cmp_ulp_distance(tbe_dtype t, uint32_t a_bits, uint32_t b_bits);

#endif
