/* optimizer.h: the row updates of TBE_SEMANTICS.md section 5 (EXACT_SGD, EXACT_ROWWISE_ADAGRAD
 * with weight decay NONE / L2 / DECOUPLE) and the weight write-back (round to nearest even, or
 * stochastic rounding keyed by Philox4x32-10). Not the gradient sums (backward_short.c,
 * backward_long.c).
 *
 * Order (normative; every step one IEEE fp32 operation, fmaf where fused):
 *   SGD:     w = fma(-lr, g, w).
 *   Adagrad: gd = g (NONE, DECOUPLE) or fma(lambda, w, g) (L2);
 *            s = ref_lane_dot(gd, gd): lane l sums s_l = fma(gd_d, gd_d, s_l) for d = l, l+32, ...
 *            ascending from +0, then s_l = s_l + s_(l xor o) for o = 16, 8, 4, 2, 1; s = s_0;
 *            m = m + s / D; mu = lr / (sqrt(m) + eps);
 *            c = 1 (NONE), fma(-mu, lambda, 1) (L2), fma(-lr, lambda, 1) (DECOUPLE);
 *            w = fma(-mu, g, c * w), the product c * w skipped when c == 1.
 * Write-back of FP16/BF16 (FP32 weights store the fp32 result as is):
 *   RNE:  one rounding to nearest even (half.h).
 *   SR:   a = x rounded toward zero in the target format, clamped to its largest finite value;
 *         q = the spacing of the target's values in a's binade (the subnormal spacing below the
 *         smallest normal); frac = (|x| - |a|) / q, exact; b = the next value after a away from
 *         zero (Inf after the largest finite value); u = word 0 of Philox4x32-10 with key
 *         (seed_lo, seed_hi) and counter (col, row_lo, row_hi, step), where row is the row's
 *         linear key (the sum of E over the tables before it, plus the row); store b if
 *         u < frac * 2^32, else a. Within range frac < 1, as in TBE_SEMANTICS.md section 5; past
 *         the largest finite value frac >= 1 only for |x| >= largest + q, which then always
 *         stores Inf, like RNE; NaN and Inf store as RNE does.
 */
#ifndef REF_OPTIMIZER_H
#define REF_OPTIMIZER_H

#include <stdint.h>

#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { REF_OPT_NONE = 0, REF_OPT_SGD = 1, REF_OPT_ROWWISE_ADAGRAD = 2 } ref_opt_kind;
typedef enum { REF_WD_NONE = 0, REF_WD_L2 = 1, REF_WD_DECOUPLE = 2 } ref_wd_mode;

/* One call's optimizer: its fp32 hyper-parameters and the write-back. */
typedef struct {
  ref_opt_kind kind;
  float lr, eps;     /* eps: Adagrad only */
  ref_wd_mode wd;    /* Adagrad only */
  float lambda;      /* weight decay; Adagrad with L2 or DECOUPLE only */
  int sr;            /* 1: stochastic rounding of FP16/BF16 weights */
  uint64_t seed;     /* Philox key (seed_lo, seed_hi) */
  uint32_t step;     /* Philox counter word 3 */
} ref_opt_config;

const char *ref_opt_name(ref_opt_kind k);
const char *ref_wd_name(ref_wd_mode m);

/* The 32-lane sum of a_d * b_d over d in [0, D) described above (the momentum's order). */
float ref_lane_dot(const float *a, const float *b, int32_t D);

/* Widens D weights of dtype t at src (16-bit types as bits) to fp32, exactly. */
void ref_load_row(const void *src, tbe_dtype t, int32_t D, float *dst);

/* One row's update: w[0..D) holds the row in fp32 on entry and the updated fp32 row on return;
 * g is the row's gradient; *m the row's momentum (Adagrad; unused by SGD). */
void ref_opt_update_row(const ref_opt_config *o, int32_t D, const float *g, float *w, float *m);

/* Stores the updated fp32 row w[0..D) into dst (dtype t): FP32 as is, FP16/BF16 rounded to
 * nearest even or, with o->sr, stochastically with the row's linear key `row`. */
void ref_store_row(const ref_opt_config *o, tbe_dtype t, const float *w, int32_t D, uint64_t row,
                   void *dst);

/* Stochastic rounding of x into t (FP16 or BF16) given the draw u; returns the bits. */
uint16_t ref_sr_round(float x, tbe_dtype t, uint32_t u);

/* The Philox draw of column col of row `row` (word 0 of the output). */
uint32_t ref_sr_draw(const ref_opt_config *o, int32_t col, uint64_t row);

#ifdef __cplusplus
}
#endif

#endif
